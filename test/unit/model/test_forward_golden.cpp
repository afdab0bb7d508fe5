// Golden test: tandem's forward pass (numerics "hf", fp32 state) against HF transformers'
// DeepseekV4ForCausalLM logits stored by tools/model/golden_hf.py for `make-model --preset tiny`.
// The checkpoint is regenerated here (make-model is deterministic), not stored.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

struct compare_stats {
    double worst_ratio = 0.0;  // max |diff| / max|logit| over all checked values
    int argmax_mismatch = 0, near_ties = 0, positions = 0;
};

// Checks one prompt's all-position logits [S, vocab] against the golden record.
void compare_prompt(const golden_set& g, const golden_prompt& p, const std::vector<float>& logits, int64_t vocab,
                    compare_stats& st) {
    const int64_t S = static_cast<int64_t>(p.tokens.size()), K = static_cast<int64_t>(g.vocab_ids.size());
    REQUIRE(int64_t(logits.size()) == S * vocab);
    for (int64_t t = 0; t < S; ++t) {
        const float* row = &logits[t * vocab];
        const double scale = p.max_abs[t];
        const int32_t am = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
        double mx = 0.0;
        for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, double(std::fabs(row[v])));
        st.worst_ratio = std::max(st.worst_ratio, std::fabs(mx - scale) / scale);
        for (int64_t k = 0; k < K; ++k)
            st.worst_ratio = std::max(st.worst_ratio, std::fabs(double(row[g.vocab_ids[k]]) - p.sampled[t * K + k]) / scale);
        if (am != p.argmax[t]) {
            // Only a true near-tie in the reference may flip (gap below the tolerance itself).
            if (p.top2_gap[t] <= 1e-4 * scale) ++st.near_ties;
            else ++st.argmax_mismatch;
        }
        ++st.positions;
    }
    if (!p.last_row.empty()) {
        const float* row = &logits[(S - 1) * vocab];
        for (int64_t v = 0; v < vocab; ++v)
            st.worst_ratio = std::max(st.worst_ratio, std::fabs(double(row[v]) - p.last_row[v]) / p.max_abs[S - 1]);
    }
}

std::vector<float> run_full(model& m, const std::vector<int32_t>& tokens) {
    auto seq = m.new_sequence();
    forward_item it{tokens, 0, seq.get(), true};
    auto out = m.forward(std::span<const forward_item>(&it, 1));
    REQUIRE_MESSAGE(out.is_ok(), out.error().message());
    return std::move(out->logits[0]);
}

}  // namespace

TEST_CASE("model: tiny checkpoint matches HF transformers logits (prefill, hf numerics)") {
    for (uint64_t seed : {1, 2}) {
        CAPTURE(seed);
        golden_set g = load_golden("tiny_seed" + std::to_string(seed));
        temp_dir dir("golden");
        make_checkpoint("tiny", seed, dir.str());
        auto m = model::load(dir.str(), model_options{numerics_mode::hf, 2});
        REQUIRE_MESSAGE(m.is_ok(), m.error().message());
        compare_stats st;
        for (const auto& p : g.prompts) compare_prompt(g, p, run_full(**m, p.tokens), (*m)->config().vocab_size, st);
        MESSAGE("seed ", seed, ": worst |diff|/max|logit| = ", st.worst_ratio, " over ", st.positions,
                " positions, near-tie argmax flips ", st.near_ties);
        CHECK(st.worst_ratio <= 1e-4);
        CHECK(st.argmax_mismatch == 0);
    }
}

TEST_CASE("model: token-by-token decode matches HF transformers logits") {
    golden_set g = load_golden("tiny_seed1");
    temp_dir dir("golden_decode");
    make_checkpoint("tiny", 1, dir.str());
    auto m = model::load(dir.str(), model_options{numerics_mode::hf, 2});
    REQUIRE(m.is_ok());
    const int64_t vocab = (*m)->config().vocab_size;
    const golden_prompt& p = g.prompts[3];  // 150 tokens: window, CSA top-k and HCA rows all in play
    auto seq = (*m)->new_sequence();
    std::vector<float> all;
    for (size_t t = 0; t < p.tokens.size(); ++t) {
        forward_item it{std::span<const int32_t>(&p.tokens[t], 1), int64_t(t), seq.get(), false};
        auto out = (*m)->forward(std::span<const forward_item>(&it, 1));
        REQUIRE(out.is_ok());
        all.insert(all.end(), out->logits[0].begin(), out->logits[0].end());
    }
    compare_stats st;
    compare_prompt(g, p, all, vocab, st);
    CHECK(st.worst_ratio <= 1e-4);
    CHECK(st.argmax_mismatch == 0);
}
