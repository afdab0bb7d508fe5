// topo/pd_convert.cpp — Field by field, each pair written together.
#include "topo/pd_convert.h"

namespace tandem::topo {

prefill_sampling to_wire(const engine::sampling_params& p, uint64_t seed) {
    prefill_sampling s;
    s.temperature = p.temperature;
    s.top_p = p.top_p;
    s.top_k = static_cast<int32_t>(p.top_k);
    s.min_p = p.min_p;
    s.repetition_penalty = p.repetition_penalty;
    s.presence_penalty = p.presence_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.seed = seed;
    s.logprobs = p.logprobs;
    s.prompt_logprobs = p.prompt_logprobs;
    s.grammar = p.grammar_spec;
    return s;
}

engine::sampling_params from_wire(const prefill_sampling& s) {
    engine::sampling_params p;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.top_k = s.top_k;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition_penalty;
    p.presence_penalty = s.presence_penalty;
    p.frequency_penalty = s.frequency_penalty;
    p.seed = s.seed;
    p.logprobs = s.logprobs;
    p.prompt_logprobs = s.prompt_logprobs;
    p.grammar_spec = s.grammar;  // compiled by the prefill server (it owns the vocabulary)
    p.max_tokens = 1;
    p.ignore_eos = true;
    return p;
}

scored_position to_wire(const engine::position_logprobs& p) {
    scored_position out{p.chosen.token, p.chosen.logprob, {}};
    for (const engine::token_logprob& t : p.top) out.top.push_back({t.token, t.logprob});
    return out;
}

engine::position_logprobs from_wire(const scored_position& p) {
    engine::position_logprobs out;
    out.chosen = {p.token, p.logprob};
    for (const token_logprob& t : p.top) out.top.push_back({t.token, t.logprob});
    return out;
}

}  // namespace tandem::topo
