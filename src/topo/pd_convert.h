// topo/pd_convert.h — Engine values ↔ pd wire values, both directions side by side, so a field
// added to sampling or logprobs is carried by both peers or by neither.
#pragma once

#include "engine/engine.h"
#include "topo/pd_protocol.h"

namespace tandem::topo {

// Decode side: what the prefill engine needs to sample the first token as single would.
prefill_sampling to_wire(const engine::sampling_params& p, uint64_t seed);
// Prefill side: the engine parameters of a job: exactly one token, EOS and stop tokens left to
// the decode side, which commits it.
engine::sampling_params from_wire(const prefill_sampling& s);

scored_position to_wire(const engine::position_logprobs& p);
engine::position_logprobs from_wire(const scored_position& p);

}  // namespace tandem::topo
