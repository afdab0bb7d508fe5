// engine/fake_executor.h — A model stand-in for scheduler tests.
//
// The logits after a token are a deterministic function of the sequence's whole token prefix
// (a running hash), never of the batch, the chunking or the step. So any scheduling — batches
// of 64, prefill chunks of 1 or 7 tokens, preemption and recompute — must reproduce exactly
// the tokens a request gets when run alone; a scheduler bug that drops, repeats or reorders a
// token changes every later token. It checks that each item continues its sequence exactly
// where the previous one stopped (TANDEM_CHECK), and records what it saw for tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/model_executor.h"

namespace tandem::engine {

struct fake_executor_options {
    int32_t vocab = 64;
    int32_t eos_token_id = 0;
    int64_t max_context = 4096;
    int64_t max_sequences = 1 << 20;
    int64_t step_delay_us = 0;  // sleep per execute(), so tests can act while requests run
    int64_t fail_step = 0;      // > 0: the n-th execute() fails (internal), changing nothing
};

class fake_executor final : public model_executor {
  public:
    explicit fake_executor(fake_executor_options opt = {});

    result<sequence_id> new_sequence() override;
    void free_sequence(sequence_id id) override;
    status execute(const step_plan& plan, step_output& out) override;
    int32_t vocab_size() const override { return opt_.vocab; }
    int32_t eos_token_id() const override { return opt_.eos_token_id; }
    int64_t max_context_tokens() const override { return opt_.max_context; }

    // The logits row after `prefix` (what execute returns for its last token).
    static void logits_for_prefix_hash(uint64_t prefix_hash, std::span<float> row);
    static uint64_t extend_hash(uint64_t prefix_hash, int32_t token);
    static constexpr uint64_t k_empty_hash = 0x5eed;

    // What a remote prefill of `tokens` lands in a fresh sequence (pd tests): as if executed.
    void land_prefix(sequence_id id, std::span<const int32_t> tokens);

    // Observations (thread-safe reads).
    int64_t live_sequences() const { return live_.load(); }
    int64_t max_batch_seen() const { return max_batch_.load(); }
    int64_t max_chunk_seen() const { return max_chunk_.load(); }
    int64_t max_logit_rows_seen() const { return max_logit_rows_.load(); }  // in one step
    int64_t steps_executed() const { return steps_.load(); }

  private:
    struct sequence_state {
        uint64_t hash = k_empty_hash;
        int64_t length = 0;
    };
    fake_executor_options opt_;
    std::unordered_map<sequence_id, sequence_state> seqs_;  // scheduler thread only
    sequence_id next_id_ = 1;
    std::atomic<int64_t> live_{0};
    std::atomic<int64_t> max_batch_{0};
    std::atomic<int64_t> max_chunk_{0};
    std::atomic<int64_t> max_logit_rows_{0};
    std::atomic<int64_t> steps_{0};
};

}  // namespace tandem::engine
