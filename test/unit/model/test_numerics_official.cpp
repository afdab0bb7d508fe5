// numerics = "official": FP8 KV / FP4 indexer (Hadamard) / FP8 activation simulations.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "model/numerics.h"
#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;

TEST_CASE("numerics: Hadamard rotation is orthonormal in Sylvester order") {
    std::vector<float> e(8, 0.0f);
    e[1] = 1.0f;
    hadamard_transform(e.data(), 8);
    const float h = 1.0f / std::sqrt(8.0f);
    const float want[8] = {h, -h, h, -h, h, -h, h, -h};  // row 1 of the Sylvester matrix
    for (int i = 0; i < 8; ++i) CHECK(e[i] == doctest::Approx(want[i]));
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> x(128), y;
    for (auto& v : x) v = nd(rng);
    y = x;
    hadamard_transform(y.data(), 128);
    hadamard_transform(y.data(), 128);  // H·H = I
    for (int i = 0; i < 128; ++i) CHECK(y[i] == doctest::Approx(x[i]).epsilon(1e-5));
}

TEST_CASE("numerics: quantization simulations land on the FP8 / FP4 grids") {
    std::vector<float> x = {0.3f, -1.7f, 100.0f, 3e-3f};
    act_quant_fp8(x.data(), 4);
    // amax 100 -> scale 2^ceil(log2(100/448)) = 0.25; 0.3/0.25 = 1.2 -> e4m3 1.25 -> 0.3125;
    // 100/0.25 = 400 lies halfway between 384 and 416 -> even mantissa 384 -> 96
    CHECK(x[0] == 0.3125f);
    CHECK(x[2] == 96.0f);
    std::vector<float> z(32, 0.0f);
    z[0] = 5.0f, z[1] = 0.7f;
    indexer_fp4_sim(z.data(), 32);
    // every value is an e2m1 code times one power-of-two scale
    float amax = 0;
    for (float v : z) amax = std::max(amax, std::fabs(v));
    const float s = std::exp2(std::ceil(std::log2(amax / 6.0f)));
    for (float v : z) {
        const float q = std::fabs(v) / s;
        CHECK((q == 0 || q == 0.5f || q == 1 || q == 1.5f || q == 2 || q == 3 || q == 4 || q == 6));
    }
}

TEST_CASE("numerics official: fp8 KV / fp4 index-K storage is lossless and chunking is bitwise stable") {
    temp_dir dir("official");
    make_checkpoint("tiny", 4, dir.str());
    session exact(dir.str(), 2, cache::kv_dtype::fp32, cache::index_k_dtype::fp32, numerics_mode::official);
    session packed(dir.str(), 2, cache::kv_dtype::fp8, cache::index_k_dtype::fp4, numerics_mode::official);
    session hf(dir.str(), 2);
    std::mt19937_64 rng(9);
    std::vector<int32_t> tokens(100);
    for (auto& t : tokens) t = int32_t(2 + rng() % 129000);
    const auto full = exact.run(exact.new_sequence(), tokens, 0, true);
    // Values already on the FP8/FP4 grids survive the compact rows exactly.
    CHECK(packed.run(packed.new_sequence(), tokens, 0, true) == full);
    // Token-by-token decode through the compact rows gives the same bits.
    auto seq = packed.new_sequence();
    std::vector<float> decoded;
    for (size_t t = 0; t < tokens.size(); ++t) {
        auto row = packed.run(seq, std::span<const int32_t>(&tokens[t], 1), int64_t(t), false);
        decoded.insert(decoded.end(), row.begin(), row.end());
    }
    CHECK(decoded == full);
    // The simulation changes the numbers, but only slightly.
    const auto ref = hf.run(hf.new_sequence(), tokens, 0, true);
    double diff = 0, mag = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff += std::fabs(ref[i] - full[i]), mag += std::fabs(ref[i]);
    CHECK(diff > 0.0);
    CHECK(diff / mag < 0.3);
}

TEST_CASE("numerics official on FP8 + FP4 weights: a sequence's logits do not depend on the batch") {
    // The MoE groups a batch's rows by expert and quantizes the gathered activations; attention
    // runs its linears as groups sharing one quantized copy of each input. None of it may let a
    // row see another row.
    temp_dir dir("official_fp8_batch");
    make_checkpoint("tiny-fp8", 6, dir.str());
    session ss(dir.str(), 2, cache::kv_dtype::fp8, cache::index_k_dtype::fp4, numerics_mode::official);
    std::mt19937_64 rng(13);
    std::vector<std::vector<int32_t>> prompts(3);
    for (size_t i = 0; i < prompts.size(); ++i)
        for (size_t t = 0; t < 20 + 11 * i; ++t) prompts[i].push_back(int32_t(2 + rng() % 129000));
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts) alone.push_back(ss.run(ss.new_sequence(), p, 0, true));
    std::vector<cache::slot_ref> slots;
    std::vector<forward_item> items;
    for (const auto& p : prompts) {
        slots.push_back(ss.new_sequence());
        items.push_back({std::span<const int32_t>(p.data(), p.size() - 1), 0, slots.back(), logit_rows::all});
    }
    auto out = ss.forward(items);
    REQUIRE(out.is_ok());
    const int64_t vocab = ss.m->config().vocab_size;
    for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        REQUIRE(out->logits[i].size() + size_t(vocab) == alone[i].size());  // all but the last position
        CHECK(std::memcmp(out->logits[i].data(), alone[i].data(), out->logits[i].size() * sizeof(float)) == 0);
    }
    // Then one batched decode step for every sequence: each row is its sequence's last position.
    for (size_t i = 0; i < prompts.size(); ++i)
        items[i] = {std::span<const int32_t>(&prompts[i].back(), 1), int64_t(prompts[i].size() - 1), slots[i], logit_rows::last};
    out = ss.forward(items);
    REQUIRE(out.is_ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(std::memcmp(out->logits[i].data(), &alone[i][(prompts[i].size() - 1) * vocab], vocab * sizeof(float)) == 0);
    }
}
