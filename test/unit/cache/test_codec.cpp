// Codecs: element formats against known values, exact round trips for the official (QAT'd)
// values, bounded error for the lossy fp8 index-K format, byte layout details.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cache/codec.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

std::vector<float> random_values(std::mt19937& rng, int64_t n, float spread) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_real_distribution<float> e(-spread, spread);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng) * std::exp2(e(rng));
    return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What the official reference keeps in its caches (dsv4-model.md §2.5 / §2.6 / §6).
std::vector<float> official_kv(std::vector<float> v, int64_t nope) {
    codec::fp8_qdq_blocks(std::span<float>(v.data(), static_cast<size_t>(nope)), 64);
    for (float& x : v) x = codec::bf16_to_float(codec::float_to_bf16(x));  // cache is bf16
    return v;
}

}  // namespace

TEST_CASE("codec: element formats") {
    CHECK(codec::e4m3_to_float(codec::float_to_e4m3(448.0f)) == 448.0f);
    CHECK(codec::e4m3_to_float(codec::float_to_e4m3(1000.0f)) == 448.0f);  // saturates
    CHECK(codec::e4m3_to_float(codec::float_to_e4m3(-1.0f)) == -1.0f);
    CHECK(codec::e4m3_to_float(codec::float_to_e4m3(std::ldexp(1.0f, -9))) == std::ldexp(1.0f, -9));
    CHECK(codec::float_to_e4m3(1.0625f) == codec::float_to_e4m3(1.0f));   // tie to even
    CHECK(codec::e4m3_to_float(codec::float_to_e4m3(1.1875f)) == 1.25f);  // tie to even (up)
    CHECK(std::isnan(codec::e4m3_to_float(0x7f)));
    // Every e4m3 code decodes and re-encodes to itself (except NaN and -0 -> same value).
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        CHECK(codec::float_to_e4m3(codec::e4m3_to_float(static_cast<uint8_t>(c))) == c);
    }
    for (int c = 0; c < 16; ++c) {
        CHECK(codec::float_to_e2m1(codec::e2m1_to_float(static_cast<uint8_t>(c))) == c);
    }
    CHECK(codec::e2m1_to_float(codec::float_to_e2m1(2.5f)) == 2.0f);  // tie to even code
    CHECK(codec::e2m1_to_float(codec::float_to_e2m1(5.0f)) == 4.0f);
    CHECK(codec::e2m1_to_float(codec::float_to_e2m1(-7.0f)) == -6.0f);
    CHECK(codec::bf16_to_float(codec::float_to_bf16(1.00390625f)) == 1.0f);  // tie to even
    CHECK(codec::bf16_to_float(codec::float_to_bf16(3.0f)) == 3.0f);
    CHECK(codec::ue8m0_to_float(127) == 1.0f);
    CHECK(codec::float_to_ue8m0(0.25f) == 125);
    CHECK(codec::pow2_block_scale(448.0f, 1e-4f, 448.0f) == 1.0f);
    CHECK(codec::pow2_block_scale(449.0f, 1e-4f, 448.0f) == 2.0f);
    CHECK(codec::pow2_block_scale(0.0f, 1e-4f, 448.0f) == std::ldexp(1.0f, -22));
}

TEST_CASE("codec: kv fp8 row round-trips official values exactly, byte layout") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    const row_format f = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8).kv_row();
    std::mt19937 rng(7);
    std::vector<std::byte> row(static_cast<size_t>(f.bytes));
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> v = official_kv(random_values(rng, f.dims, 12.0f), f.value_elems);
        if (trial == 0) std::fill(v.begin(), v.begin() + 64, 0.0f);  // an all-zero block
        std::vector<float> back(static_cast<size_t>(f.dims));
        codec::encode_row(f, v, row.data());
        codec::decode_row(f, row.data(), back);
        REQUIRE(bit_equal(v, back));
    }
    // The rope tail is stored as plain bf16 right after the 448 e4m3 bytes; pad byte is zero.
    std::vector<float> v(static_cast<size_t>(f.dims), 0.0f);
    v[448] = 1.5f;
    codec::encode_row(f, v, row.data());
    uint16_t rope0;
    std::memcpy(&rope0, row.data() + 448, 2);
    CHECK(rope0 == codec::float_to_bf16(1.5f));
    CHECK(row[static_cast<size_t>(f.bytes - 1)] == std::byte{0});
}

TEST_CASE("codec: fp8 row quantization equals the official simulation on raw values") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    const row_format f = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8).kv_row();
    std::mt19937 rng(11);
    std::vector<std::byte> row(static_cast<size_t>(f.bytes));
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> raw = random_values(rng, f.dims, 6.0f);
        for (size_t i = 448; i < raw.size(); ++i) raw[i] = codec::bf16_to_float(codec::float_to_bf16(raw[i]));
        std::vector<float> sim = raw;
        codec::fp8_qdq_blocks(std::span<float>(sim.data(), 448), 64);
        std::vector<float> back(static_cast<size_t>(f.dims));
        codec::encode_row(f, raw, row.data());
        codec::decode_row(f, row.data(), back);
        REQUIRE(bit_equal(sim, back));
    }
}

TEST_CASE("codec: index-K fp4 round-trips official values exactly") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    const row_format f = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp4).index_k_row();
    std::mt19937 rng(3);
    std::vector<std::byte> row(static_cast<size_t>(f.bytes));
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> v = random_values(rng, f.dims, 10.0f);
        codec::fp4_qdq_blocks(v, 32);
        std::vector<float> back(static_cast<size_t>(f.dims));
        codec::encode_row(f, v, row.data());
        codec::decode_row(f, row.data(), back);
        REQUIRE(bit_equal(v, back));
    }
    std::vector<float> v(static_cast<size_t>(f.dims), 0.0f);
    v[0] = 1.0f;   // code 2, low nibble of byte 0
    v[1] = -6.0f;  // code 0xf, high nibble
    codec::encode_row(f, v, row.data());
    // Block scale: amax 6 -> 2^ceil(log2(1)) = 1; codes: 1.0 -> 2, -6 -> 0x8|7.
    CHECK(static_cast<uint8_t>(row[0]) == 0xf2);
    CHECK(static_cast<uint8_t>(row[64]) == 127);  // the first ue8m0 scale byte
}

TEST_CASE("codec: bf16 and fp32 rows; fp8 index-K is lossy but bounded") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    std::mt19937 rng(5);
    for (kv_dtype kv : {kv_dtype::bf16, kv_dtype::fp32}) {
        for (index_k_dtype idx : {index_k_dtype::bf16, index_k_dtype::fp32}) {
            layout_spec l = make_layout(flash, kv, idx);
            for (const row_format* f : {&l.kv_row(), &l.index_k_row()}) {
                std::vector<float> v = random_values(rng, f->dims, 8.0f);
                if (f->encoding == row_encoding::kv_bf16 || f->encoding == row_encoding::index_k_bf16) {
                    for (float& x : v) x = codec::bf16_to_float(codec::float_to_bf16(x));
                }
                std::vector<std::byte> row(static_cast<size_t>(f->bytes));
                std::vector<float> back(static_cast<size_t>(f->dims));
                codec::encode_row(*f, v, row.data());
                codec::decode_row(*f, row.data(), back);
                CHECK(bit_equal(v, back));
            }
        }
    }
    const row_format f = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8).index_k_row();
    std::vector<float> v = random_values(rng, f.dims, 2.0f);
    std::vector<std::byte> row(static_cast<size_t>(f.bytes));
    std::vector<float> back(static_cast<size_t>(f.dims));
    codec::encode_row(f, v, row.data());
    codec::decode_row(f, row.data(), back);
    float amax = 0, err = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        amax = std::max(amax, std::fabs(v[i]));
        err = std::max(err, std::fabs(v[i] - back[i]) / std::max(std::fabs(v[i]), amax / 64));
    }
    CHECK(err < 0.07f);  // 3 mantissa bits: half-ulp relative error 1/16 (+ subnormal slack)
    float scale;
    std::memcpy(&scale, row.data() + 128, 4);
    CHECK(scale == amax / 448.0f);
}

// decode_rows is the forward pass's bulk reader: it must give bitwise decode_row's values for
// every format and every byte pattern — random bytes cover NaN codes (0x7f/0xff), subnormal e4m3,
// -0, every e2m1 code and extreme scales, which official values never produce.
TEST_CASE("codec: decode_rows is bitwise decode_row per row, any bytes") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> byte(0, 255);
    for (kv_dtype kv : {kv_dtype::fp8, kv_dtype::bf16, kv_dtype::fp32}) {
        for (index_k_dtype idx : {index_k_dtype::fp8, index_k_dtype::fp4, index_k_dtype::bf16, index_k_dtype::fp32}) {
            layout_spec l = make_layout(flash, kv, idx);
            for (const row_format* f : {&l.kv_row(), &l.index_k_row()}) {
                CAPTURE(f->name);
                const int64_t n = 5;
                std::vector<std::byte> rows(static_cast<size_t>(n * f->bytes));
                for (auto& b : rows) b = std::byte(static_cast<uint8_t>(byte(rng)));
                std::vector<float> want(static_cast<size_t>(n * f->dims)), got(want.size());
                for (int64_t r = 0; r < n; ++r)
                    codec::decode_row(*f, rows.data() + r * f->bytes,
                                      std::span<float>(&want[static_cast<size_t>(r * f->dims)], size_t(f->dims)));
                codec::decode_rows(*f, rows.data(), n, got.data());
                CHECK(bit_equal(want, got));
            }
        }
    }
}
