// topo/pd_faults.h — The [transport] fault_* keys as transport fault options, with the pd layer's
// part filled in: what an abort-storm frame contains.
//
// Storm frames are ABORTs (cause client) for request ids that never exist: the high bit is set
// and engines count request ids up from 1, so a storm exercises the "ABORT for an unknown
// request" path on the peer without killing real requests.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "transport/frame.h"
#include "transport/tcp.h"

namespace tandem::topo {

inline constexpr uint64_t k_storm_request_id_bit = uint64_t{1} << 63;

// The n-th storm frame: ABORT{request_id = k_storm_request_id_bit | mix(n), cause client}.
transport::frame make_storm_abort_frame(uint64_t n);

// fault_options_from_config(t) with storm_frame = make_storm_abort_frame.
transport::fault_options pd_fault_options(const transport_section& t);

}  // namespace tandem::topo
