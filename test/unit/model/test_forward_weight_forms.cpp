// The forward pass on weights kept in their stored form (BF16; FP8 e4m3 block-128 + E8M0 scales
// with FP4 e2m1 experts) gives bitwise the logits of the same model whose checkpoint holds the
// fp32 expansion of those weights — decoding is exact, so the fp32 model's HF-golden agreement
// carries over — and keeps the chunk/batch/thread invariance. The weights are the checkpoint's
// own bytes (copied into huge pages, the default, or mapped: the same logits); the copies made
// at load beyond those are a small fraction of it.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "model/dtype.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

// Rewrites `src` with every float / FP8 / FP4 tensor expanded to F32 (scales folded in), using
// the model's scalar decoders — an independent path from the kernels' in-register decoding.
void write_fp32_expansion(const std::string& src, const std::string& dst) {
    auto ck = checkpoint::open_dir(src);
    REQUIRE(ck.is_ok());
    std::vector<std::pair<tensor_view, std::vector<uint8_t>>> out;
    for (const auto& [name, v] : ck->tensors()) {
        auto ends = [&](const char* suf) {
            const size_t n = std::strlen(suf);
            return name.size() >= n && name.compare(name.size() - n, n, suf) == 0;
        };
        if (ends(".scale")) continue;
        tensor_view t = *v;
        std::vector<float> f;
        const std::string base = ends(".weight") ? name.substr(0, name.size() - 7) : name;
        const tensor_view* sc = ck->find(base + ".scale");
        if (t.type == dtype::f8_e4m3) {
            REQUIRE(sc);
            const int64_t rows = t.shape[0], cols = t.shape[1];
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    f.push_back(e4m3_to_float(t.data[r * cols + c]) *
                                e8m0_to_float(sc->data[(r / 128) * sc->shape[1] + c / 128]));
        } else if (t.type == dtype::i8) {
            REQUIRE(sc);
            const int64_t rows = t.shape[0], cols = t.shape[1] * 2;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    const uint8_t byte = t.data[(r * cols + c) / 2];
                    f.push_back(e2m1_to_float(c % 2 ? byte >> 4 : byte & 0xf) *
                                e8m0_to_float(sc->data[r * sc->shape[1] + c / 32]));
                }
            t.shape[1] = cols;
        } else if (t.type == dtype::bf16) {
            for (int64_t i = 0; i < t.numel(); ++i) {
                uint16_t h;
                std::memcpy(&h, t.data + 2 * i, 2);
                f.push_back(bf16_to_float(h));
            }
        } else {
            out.push_back({t, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
            continue;
        }
        t.type = dtype::f32;
        std::vector<uint8_t> bytes(f.size() * 4);
        std::memcpy(bytes.data(), f.data(), bytes.size());
        out.push_back({t, std::move(bytes)});
    }
    std::vector<tensor_to_write> views;
    for (const auto& [t, bytes] : out) views.push_back({t.name, t.type, t.shape, bytes});
    REQUIRE(write_safetensors(dst + "/model.safetensors", views).is_ok());
    std::filesystem::copy_file(src + "/config.json", dst + "/config.json");
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<int32_t> random_prompt(uint64_t seed, int64_t n) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(2 + rng() % 129000);
    return t;
}

}  // namespace

TEST_CASE("model: stored BF16 / FP8+FP4 weights give bitwise the logits of their fp32 expansion") {
    for (const char* preset : {"tiny-bf16", "tiny-fp8"}) {
        CAPTURE(preset);
        temp_dir stored_dir(std::string("forms_") + preset), f32_dir(std::string("forms_f32_") + preset);
        make_checkpoint(preset, 5, stored_dir.str());
        write_fp32_expansion(stored_dir.str(), f32_dir.str());
        session stored(stored_dir.str(), 2), expanded(f32_dir.str(), 2);
        const auto a = random_prompt(41, 70), b = random_prompt(42, 23);
        const auto want = expanded.run(expanded.new_sequence(), a, 0, true);
        const auto got = stored.run(stored.new_sequence(), a, 0, true);
        CHECK(bitwise_equal(got, want));
        // The same from the mapped files as from the copy in huge pages (the default).
        {
            auto mapped = model::load(stored_dir.str(), model_options{numerics_mode::hf, 2, weight_pages::mapped});
            REQUIRE(mapped.is_ok());
            CHECK((*mapped)->memory().copied_bytes == 0);
            CHECK(stored.m->memory().copied_bytes > 0);
            auto layout = tandem::cache::layout_spec::create((*mapped)->config(),
                                                             tandem::cache::layout_options{tandem::cache::kv_dtype::fp32,
                                                                                           tandem::cache::index_k_dtype::fp32, 128});
            REQUIRE(layout.is_ok());
            auto pool = tandem::cache::page_pool::create(*layout, tandem::cache::pool_options{int64_t{64} << 20, 2});
            REQUIRE(pool.is_ok());
            auto slot = (*pool)->alloc_sequence(1);
            (*pool)->reset_sequence_state(slot);
            REQUIRE((*pool)->ensure_capacity(slot, int64_t(a.size())));
            std::vector<forward_item> items = {{a, 0, slot, logit_rows::all}};
            auto out = (*mapped)->forward(**pool, items);
            REQUIRE(out.is_ok());
            CHECK(bitwise_equal(out->logits[0], got));
        }

        // Invariance on the stored form: token-by-token decode batched with another sequence's
        // prefill, on one thread, gives the same bits.
        session one(stored_dir.str(), 1);
        auto sa = one.new_sequence(), sb = one.new_sequence();
        one.run(sa, std::span<const int32_t>(a.data(), 40), 0, false);
        const std::vector<float> tail = one.decode_beside_prefill(sa, a, 40, sb, b);
        const int64_t vocab = stored.m->config().vocab_size;
        CHECK(bitwise_equal(tail, std::vector<float>(got.begin() + 40 * vocab, got.end())));

        // Nothing big was copied: resident weights stay within 1.05 × the checkpoint.
        const weight_memory& mem = stored.m->memory();
        CHECK(mem.in_place_total() + mem.converted_bytes <= mem.checkpoint_bytes * 105 / 100);
        CHECK(mem.in_place_total() > mem.checkpoint_bytes * 8 / 10);
    }
}

namespace {
// Overwrites the first byte of tensor `name`'s data in dir/model.safetensors.
void patch_first_byte(const std::string& dir, const std::string& name, uint8_t value) {
    const std::string path = dir + "/model.safetensors";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    REQUIRE(parser.parse(header).get(root) == simdjson::SUCCESS);
    simdjson::dom::array offsets;
    REQUIRE(root[name]["data_offsets"].get_array().get(offsets) == simdjson::SUCCESS);
    const int64_t begin = int64_t(offsets.at(0));
    f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
    f.write(reinterpret_cast<const char*>(&value), 1);
    REQUIRE(f.good());
}
}  // namespace

TEST_CASE("weights: FP8 block scales the kernels cannot fold are a startup error naming the tensor") {
    // 0xff is E8M0's NaN code; 2^10 is beyond the 2^8 the FP8 kernels fold 2^120 into.
    for (uint8_t bad : {uint8_t{0xff}, uint8_t{127 + 10}}) {
        CAPTURE(int(bad));
        temp_dir dir("bad_scale");
        make_checkpoint("tiny-fp8", 1, dir.str());
        patch_first_byte(dir.str(), "layers.1.attn.wq_b.scale", bad);
        auto r = model::load(dir.str(), model_options{});
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.error().message().find("layers.1.attn.wq_b.scale") != std::string::npos);
        CHECK(r.error().message().find("scale 0") != std::string::npos);
    }
}
