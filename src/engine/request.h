// engine/request.h — The scheduler's record of one request. Owned and touched only by the
// scheduler thread after submit() hands it over through the inbox.
//
// Token bookkeeping (the invariant the step builder and the commit rely on):
//   tokens()            = prompt ++ output           (everything known about the sequence)
//   [0, computed)         tokens whose model state the executor holds for `sequence`
//   [computed, total)     tokens still to feed; 1 while decoding, more while (re)prefilling
//   capacity held       >= total tokens while running (allocated before each step)
//   [0, emitted)          output tokens already sent to the sink
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request_state.h"
#include "engine/step_plan.h"
#include "engine/verifier.h"

namespace tandem::engine {

struct request {
    request_id id = 0;
    std::string trace_id;
    std::vector<int32_t> prompt;
    sampling_params params;
    event_sink sink;
    // pd prefill side (scheduler::submit with a prefill_hook): ships the prompt's state.
    std::function<status(sequence_id, int64_t computed, bool done)> prefill_progress;
    uint64_t seed = 0;  // params.seed, or drawn from the process RNG at submit

    state_record state;
    std::vector<int32_t> output;
    sequence_id sequence = -1;  // -1 while queued
    int64_t computed = 0;
    bool started = false;  // admitted at least once (queue timeout no longer applies)

    // Emission.
    size_t emitted = 0;
    std::vector<position_logprobs> pending_logprobs;  // for output[emitted..]
    std::vector<position_logprobs> prompt_logprobs;   // [0] placeholder, then positions 1..
    int64_t prompt_logprobs_next = 1;                 // next prompt position to score
    bool prompt_logprobs_sent = false;

    // The end: set once, when the request reaches a terminal state.
    finish_reason reason = finish_reason::none;
    status error;
    int32_t stop_token = -1;

    // Shadow verification (verifier.h): chosen at admission; then one served_position per
    // output token. state_path says what fed the sequence's state: plain (computed here), or
    // pd_transfer once a transfer landed; a prefix-cache or host-tier hit must set its own path
    // when it fills state, and a preemption (recompute from scratch) resets it to plain.
    bool verify = false;
    verify_path state_path = verify_path::plain;
    std::vector<served_position> served;

    // Timing, in monotonic seconds.
    double submitted_s = 0.0;
    double first_token_s = -1.0;
    double last_token_s = -1.0;

    int64_t total_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
    int32_t token_at(int64_t i) const {
        int64_t p = static_cast<int64_t>(prompt.size());
        return i < p ? prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - p)];
    }
    bool transferring() const { return state.state == request_state::transferring; }
    bool wants_prompt_logprobs() const {
        return params.prompt_logprobs && prompt_logprobs_next < static_cast<int64_t>(prompt.size());
    }
};

}  // namespace tandem::engine
