// engine/sampler.h — Turns one row of model logits into one token (plus logprobs).
//
// Pure functions of (logits row, parameters, token history, seed, position): no state, no
// dependence on the batch, so batch invariance holds by construction (design invariant 8).
// Reductions run over the row in token-id order with double accumulators.
//
// Order of operations (HF transformers' logits-processor order):
//   1. repetition_penalty (HF): every distinct token in prompt + output: logit > 0 → logit / p,
//      else logit * p.
//   2. frequency / presence penalties (OpenAI): over generated tokens only,
//      logit -= count * frequency_penalty + (count > 0) * presence_penalty.
//   2b. a grammar mask (constrained decoding): tokens it does not allow get -inf, so neither
//      greedy nor a draw can pick them; the mask itself is deterministic (grammar/grammar.h).
//   3. temperature == 0 → greedy: argmax of the penalized logits, ties → lowest token id.
//      Otherwise logits / temperature, then top_k, top_p, min_p masks (in that order; each
//      keeps at least the most likely token), then one draw from the renormalized distribution
//      with counter_uniform(seed, position).
// Logprobs: log-softmax of the RAW model logits (before penalties, temperature and masks), as
// vLLM and the OpenAI API report by default; the chosen token's value and the top-k
// alternatives (best first, ties → lowest id) come from that same distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace tandem::engine {

struct sample_context {
    std::span<const int32_t> prompt;
    std::span<const int32_t> output;  // tokens generated so far
    uint64_t seed = 0;
    uint64_t position = 0;  // index of the token being drawn within the output
};

struct sample_result {
    int32_t token = -1;
    position_logprobs logprobs;  // filled when params.logprobs >= 0
};

// Applies penalties in place (steps 1–2 above).
void apply_penalties(std::span<float> logits, const sampling_params& params,
                     const sample_context& ctx);

// Sets every token `allowed` does not allow to -inf (step 2b).
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed);

// log-softmax of `logits` into `out` (same size).
void log_softmax(std::span<const float> logits, std::span<float> out);

// The k best tokens of `logprobs`, best first, ties → lowest id.
std::vector<token_logprob> top_tokens(std::span<const float> logprobs, int64_t k);

// Greedy: argmax, ties → lowest id.
int32_t argmax(std::span<const float> logits);

// The probabilities left after temperature and the top_k / top_p / min_p masks (zero for
// masked tokens), not normalized. `logits` are already penalized.
std::vector<double> filtered_probs(std::span<const float> logits, const sampling_params& params);

// Steps 1–3 plus logprobs. `scratch` is reused between calls to avoid allocation. `allowed`:
// the grammar's mask (bit t % 32 of word t / 32 allows token t); empty: every token.
sample_result sample_token(std::span<const float> logits, const sampling_params& params,
                           const sample_context& ctx, std::vector<float>& scratch,
                           std::span<const uint32_t> allowed = {});

}  // namespace tandem::engine
