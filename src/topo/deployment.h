// topo/deployment.h — What `tandem serve` runs, chosen at startup by [topology] and [transport]:
//
//   single                 one engine (prefill and decode on one pool)
//   pd, role both          a prefill engine and a decode engine in this process, each with its
//                          own model, pool and scheduler thread, joined by transport.kind
//                          (inproc, or tcp over loopback)
//   pd, role prefill       only the prefill engine; decode processes connect to
//                          transport.listen_host:listen_port (tcp)
//   pd, role decode        only the decode engine; it connects to every transport.peers entry
//                          (tcp) and balances jobs over the ready ones
//
// Owns every engine, transport and link, and their shutdown order: transports stop first (no
// event can reach an engine being destroyed), then the decode engine (its unfinished requests
// end with an error), then the prefill engine. The API sees only api_engine().
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/liveness.h"
#include "core/status.h"
#include "engine/engine.h"

namespace tandem::topo {

// The [topology]/[transport] combination is servable; errors name the keys (exit 2).
status validate_topology(const config& cfg);

class deployment {
  public:
    // Loads the model(s) and starts every loop; heartbeats register in `liveness`.
    static result<std::unique_ptr<deployment>> create(const config& cfg,
                                                      liveness_registry& liveness);
    virtual ~deployment() = default;

    // The engine generation requests go to; null in a prefill-only process.
    virtual engine::engine* api_engine() = 0;
    // Why api_engine() is null (for the 503 a prefill-only process answers).
    virtual std::string no_engine_reason() const = 0;
    // Beyond the loops' heartbeats: why this deployment cannot serve now (pd decode without a
    // ready prefill peer), or nothing.
    virtual std::optional<std::string> health_problem() const = 0;
    // Prometheus text for the deployment's own metrics (pd transfers, jobs, transport).
    virtual std::string render_metrics() const = 0;
    // Where decode peers connect ("host:port"), when this process runs a tcp prefill side.
    virtual std::string prefill_address() const { return {}; }
    // One line for the startup log.
    virtual std::string describe() const = 0;
};

}  // namespace tandem::topo
