// model/step_memory.h — The CPU forward pass's step buffers: the most memory a step of a given
// shape can make them hold, so the cache pool is sized beside them instead of over them.
//
// Why: the forward keeps its activation buffers between steps, grown to the largest step it has
// run (a steady step allocates nothing), and at V4-Flash's widths a 2048-token prefill holds
// ~1.7 GiB of them. A pool sized as cache.memory_fraction of the memory left after loading did
// not count them: the first long prompt could push the process past the machine's memory. The
// engine now takes step_buffer_bound() of its largest step out of the available memory first, and
// `tandem plan` prints it.
//
// The bound is a sum over every buffer of its largest size in such a step (model::
// step_buffer_bytes() reports what they hold, which the unit tests hold against it), plus the
// per-thread scratch (score, key and packing buffers of each pool thread) and the logits the step
// returns, which the head writes straight into the engine's step output (model::forward_into).
#pragma once

#include <cstdint>

#include "model/model.h"
#include "model/model_config.h"

namespace tandem::model {

// The largest step to plan for.
struct step_shape {
    int64_t tokens = 0;           // rows: prefill-chunk tokens plus one per decoding sequence
    int64_t sequences = 0;        // batch items
    int64_t logit_rows = 0;       // rows whose logits come back (one per item; every row with prompt logprobs)
    int64_t context_tokens = 0;   // Σ over the items of their position after the step (what attention reads)
    int64_t longest_context = 0;  // the largest single one
};

struct step_memory {
    int64_t activations = 0;  // per-row buffers: residual streams, attention and MoE intermediates
    int64_t context = 0;      // the sequences' cache rows decoded for reading, and selections
    int64_t logits = 0;       // the head's output: the engine's step output, kept between steps
    int64_t per_thread = 0;   // every pool thread's scratch together
    int64_t total() const { return activations + context + logits + per_thread; }
};

step_memory step_buffer_bound(const model_config& c, const step_shape& s, numerics_mode numerics, int threads);

// The scheduler's limits that shape its largest step ([scheduler], [verify]).
struct step_limits {
    int64_t max_prefill_tokens = 0;
    int64_t max_running = 0;
    int64_t max_prompt_logprob_tokens = 0;
    int64_t verify_chunk_tokens = 0;  // verify.max_chunk_tokens while verification is on, else 0
};

// The step the scheduler can build at most: max_prefill_tokens of prompts plus one token for each
// of max_running sequences; logits for a row of each sequence plus every prompt-logprob row (at
// most max_prompt_logprob_tokens of the prompts'), plus the shadow verifier's chunk (its own step
// output, engine/verifier.h); contexts filling `context_tokens` (the cache pool's capacity; each
// sequence at most max_position_embeddings).
step_shape largest_step(const model_config& c, const step_limits& limits, int64_t context_tokens);

}  // namespace tandem::model
