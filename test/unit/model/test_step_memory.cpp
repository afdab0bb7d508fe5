// The forward pass's step buffers against model/step_memory.h's bound: what they hold after a
// run of steps never exceeds the bound of a step as large as the largest of them in every
// dimension, and the bound is not padded beyond a few percent (else the pool gives memory away).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "model/step_memory.h"
#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

constexpr int k_threads = 2;

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t vocab, int64_t n) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(2 + rng() % uint64_t(vocab - 2)));
    return t;
}

// Runs the items and widens `most` to cover the step.
void run_step(session& ss, const std::vector<forward_item>& items, step_shape& most) {
    auto out = ss.forward(items);
    REQUIRE_MESSAGE(out.is_ok(), out.error().message());
    int64_t tokens = 0, context = 0, longest = 0;
    for (const forward_item& it : items) {
        const int64_t end = it.start_pos + static_cast<int64_t>(it.tokens.size());
        tokens += static_cast<int64_t>(it.tokens.size());
        context += end;
        longest = std::max(longest, end);
    }
    most.tokens = std::max(most.tokens, tokens);
    most.sequences = std::max(most.sequences, static_cast<int64_t>(items.size()));
    int64_t logit_rows = 0;
    for (const forward_item& it : items) logit_rows += logit_row_count(it);
    most.logit_rows = std::max(most.logit_rows, logit_rows);
    most.context_tokens = std::max(most.context_tokens, context);
    most.longest_context = std::max(most.longest_context, longest);
}

// What the model's own buffers may hold: the bound less the per-thread scratch (not counted by
// step_buffer_bytes). forward() keeps the logits in the model's buffer, where the engine's
// forward_into writes them into its step output instead: the bound's logits term either way.
int64_t model_held_limit(const step_memory& b) { return b.total() - b.per_thread; }

}  // namespace

TEST_CASE("model: step buffers stay within step_buffer_bound over prefills, batched decode and reshuffled batches") {
    temp_dir dir("step_memory");
    make_checkpoint("tiny", 11, dir.str());
    for (const numerics_mode numerics : {numerics_mode::hf, numerics_mode::official}) {
        CAPTURE(static_cast<int>(numerics));
        session ss(dir.str(), k_threads, cache::kv_dtype::fp32, cache::index_k_dtype::fp32, numerics);
        const model_config& c = ss.m->config();
        std::mt19937_64 rng(7);
        step_shape most;
        CHECK(ss.m->step_buffer_bytes() == 0);

        // A long prompt (CSA rows past the indexer's top-k, HCA rows) beside a short one.
        const cache::slot_ref a = ss.new_sequence(), b = ss.new_sequence();
        const std::vector<int32_t> ta = random_tokens(rng, c.vocab_size, 340), tb = random_tokens(rng, c.vocab_size, 60);
        run_step(ss, {{std::span<const int32_t>(ta.data(), 300), 0, a, logit_rows::last}, {std::span<const int32_t>(tb.data(), 40), 0, b, logit_rows::last}},
                 most);
        const int64_t after_prefill = ss.m->step_buffer_bytes();
        const step_memory bound = step_buffer_bound(c, most, numerics, k_threads);
        CHECK(after_prefill > 0);
        CHECK(after_prefill <= model_held_limit(bound));
        // Tight: the activations and context terms are each buffer's size, not a padded guess.
        CHECK(double(bound.activations + bound.context) <= 1.10 * double(after_prefill));

        // Batched decode: within the bound, and all but nothing past the prefill's buffers (only a
        // row's selection list may grow: row 0 now queries the long context's compressed rows).
        for (int64_t step = 0; step < 6; ++step)
            run_step(ss, {{std::span<const int32_t>(&ta[300 + step], 1), 300 + step, a, logit_rows::last},
                          {std::span<const int32_t>(&tb[40 + step], 1), 40 + step, b, logit_rows::last}},
                     most);
        CHECK(ss.m->step_buffer_bytes() <= model_held_limit(step_buffer_bound(c, most, numerics, k_threads)));
        CHECK(ss.m->step_buffer_bytes() - after_prefill <= after_prefill / 100);

        // The long sequence moves to another batch position behind a new prompt, then a third
        // joins: per-position views used to keep the long context's rows at both positions.
        const cache::slot_ref n1 = ss.new_sequence();
        const std::vector<int32_t> tn = random_tokens(rng, c.vocab_size, 30);
        run_step(ss, {{std::span<const int32_t>(tn.data(), 20), 0, n1, logit_rows::last},
                      {std::span<const int32_t>(&ta[306], 1), 306, a, logit_rows::last}},
                 most);
        run_step(ss, {{std::span<const int32_t>(&tb[46], 1), 46, b, logit_rows::last},
                      {std::span<const int32_t>(&tn[20], 1), 20, n1, logit_rows::last},
                      {std::span<const int32_t>(&ta[307], 33), 307, a, logit_rows::last}},
                 most);
        const int64_t held = ss.m->step_buffer_bytes();
        CHECK(held <= model_held_limit(step_buffer_bound(c, most, numerics, k_threads)));
    }
}

TEST_CASE("model: the bound grows with every dimension of the step, and largest_step is what the scheduler can build") {
    auto cfg = preset_config("small");
    REQUIRE(cfg.is_ok());
    const step_shape base{64, 4, 4, 4096, 2048};
    const int64_t at_base = step_buffer_bound(*cfg, base, numerics_mode::hf, 2).total();
    for (int dim = 0; dim < 5; ++dim) {
        step_shape wider = base;
        int64_t* field[] = {&wider.tokens, &wider.sequences, &wider.logit_rows, &wider.context_tokens, &wider.longest_context};
        *field[dim] *= 4;
        if (dim == 4) wider.context_tokens = wider.longest_context;  // the longest is part of the sum
        CAPTURE(dim);
        CHECK(step_buffer_bound(*cfg, wider, numerics_mode::hf, 2).total() > at_base);
    }
    CHECK(step_buffer_bound(*cfg, base, numerics_mode::official, 2).activations >
          step_buffer_bound(*cfg, base, numerics_mode::hf, 2).activations);  // FP8-simulated copies
    CHECK(step_buffer_bound(*cfg, base, numerics_mode::hf, 4).per_thread ==
          2 * step_buffer_bound(*cfg, base, numerics_mode::hf, 2).per_thread);

    const step_shape s = largest_step(*cfg, {2048, 64, 256}, int64_t{1} << 40);
    CHECK(s.tokens == 2048 + 64);
    CHECK(s.sequences == 64);
    CHECK(s.logit_rows == 256 + 64);  // a row per sequence and the prompt-logprob rows
    CHECK(s.longest_context == cfg->max_position_embeddings);
    CHECK(s.context_tokens == 64 * cfg->max_position_embeddings);
    CHECK(largest_step(*cfg, {2048, 64, 4096}, int64_t{1} << 40).logit_rows == s.tokens);  // at most every row
    CHECK(largest_step(*cfg, {100, 64, 256}, int64_t{1} << 40).logit_rows == 100 + 64);
    const step_shape small_pool = largest_step(*cfg, {2048, 64, 256}, 100000);
    CHECK(small_pool.context_tokens == 100000);
    CHECK(small_pool.longest_context == 100000);
}
