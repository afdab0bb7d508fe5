// topo/pd_deployment.h — The pd topology's deployment (see deployment.h for the roles).
#pragma once

#include "topo/deployment.h"

namespace tandem::topo {

// Keys read besides the engine's: topology.role, transport.* (kind, listen_host, listen_port,
// peers, handshake_timeout_ms, transfer_timeout_ms, abort_lease_ms, reconnect_*, max_frame_bytes,
// fault_*). validate_topology() has accepted `cfg`.
result<std::unique_ptr<deployment>> make_pd_deployment(const config& cfg,
                                                       liveness_registry& liveness);

}  // namespace tandem::topo
