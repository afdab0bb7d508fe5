// engine/step_plan.h — What one lockstep step computes, as a plain value.
//
// The scheduler builds one step_plan per step and hands it to the model executor; nothing else
// flows from the scheduler to the model. Being a value (no pointers into scheduler state) it
// could be serialized and broadcast so several ranks execute the identical step
// (design invariant 6: ranks never decide from local state).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::engine {

using sequence_id = int64_t;  // the executor's handle for one sequence's model state

enum class logits_mode : uint8_t {
    none,  // no row: a prefill chunk that does not reach the end of the known tokens
    last,  // one row, for the chunk's last token: the next token will be sampled from it
    all,   // one row per chunk token (prompt logprobs); the last one is also sampled from
};

struct plan_item {
    uint64_t request = 0;         // the engine's request id (events, logs); executor ignores it
    sequence_id sequence = -1;    // executor: whose state to extend
    int64_t start_position = 0;   // executor: position of tokens[0]; equals tokens already held
    std::vector<int32_t> tokens;  // executor: the chunk to append, in order
    logits_mode logits = logits_mode::none;  // executor: which rows to return
};

struct step_plan {
    uint64_t step = 0;              // step counter (logs, ranks check they agree)
    std::vector<plan_item> items;   // executor: in this order; rows come back in this order
    int64_t prefill_tokens = 0;     // metrics: chunk tokens of prefilling sequences
    int64_t decode_tokens = 0;      // metrics: one per decoding sequence
};

// The executor's answer: logits rows for the items that asked, concatenated in plan order.
struct step_output {
    int32_t vocab = 0;
    std::vector<float> logits;        // rows × vocab, row-major
    std::vector<int64_t> first_row;   // per plan item: index of its first row (-1: none)
    std::vector<int64_t> row_count;   // per plan item: 0, 1 or tokens.size()
};

}  // namespace tandem::engine
