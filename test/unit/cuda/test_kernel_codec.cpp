// The store/read row codecs of the CUDA kernels (cuda/host/kernel_codec.h) against cache::codec:
// the same bytes for every row format, the same values back.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cache/codec.h"
#include "cache/layout.h"
#include "cuda/host/cuda_ops.h"
#include "cuda/host/kernel_codec.h"

using namespace tandem;

namespace {

std::vector<std::vector<float>> probe_rows(int64_t dims) {
    std::vector<std::vector<float>> rows;
    std::mt19937 rng(static_cast<uint32_t>(dims));
    for (float scale : {1.0f, 1e-3f, 300.0f, 1e5f, 1e-9f}) {
        std::normal_distribution<float> d(0.0f, scale);
        std::vector<float> r(static_cast<size_t>(dims));
        for (float& x : r) x = d(rng);
        rows.push_back(r);
    }
    rows.push_back(std::vector<float>(static_cast<size_t>(dims), 0.0f));  // all zero: the amax floor
    std::vector<float> mixed(static_cast<size_t>(dims), 0.0f);
    for (int64_t i = 0; i < dims; i += 7) mixed[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i) * 0.37f;
    rows.push_back(mixed);
    return rows;
}

void check_format(const cache::row_format& f) {
    CAPTURE(f.name);
    const kmath::row_codec c = cuda::row_codec_of(f);
    for (const auto& v : probe_rows(f.dims)) {
        std::vector<std::byte> want(static_cast<size_t>(f.bytes));
        std::vector<uint8_t> got(static_cast<size_t>(f.bytes), 0xAB);  // stale bytes must be overwritten
        cache::codec::encode_row(f, v, want.data());
        kmath::encode_row(c, v.data(), got.data());
        CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
        std::vector<float> back_want(v.size()), back_got(v.size());
        cache::codec::decode_row(f, want.data(), back_want);
        kmath::decode_row(c, got.data(), back_got.data());
        CHECK(std::memcmp(back_got.data(), back_want.data(), back_want.size() * 4) == 0);
    }
}

}  // namespace

TEST_CASE("kmath row codecs write cache::codec's bytes for every KV and index-K format") {
    for (auto d : {cache::kv_dtype::fp8, cache::kv_dtype::bf16, cache::kv_dtype::fp32})
        for (int64_t head : {512, 128}) {
            auto f = cache::make_kv_row_format(d, head, 64);
            REQUIRE(f.is_ok());
            check_format(*f);
        }
    for (auto d : {cache::index_k_dtype::fp8, cache::index_k_dtype::bf16, cache::index_k_dtype::fp4,
                   cache::index_k_dtype::fp32}) {
        auto f = cache::make_index_k_row_format(d, 128);
        REQUIRE(f.is_ok());
        check_format(*f);
    }
}
