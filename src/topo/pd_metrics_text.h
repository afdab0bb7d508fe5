// topo/pd_metrics_text.h — The pd metrics in Prometheus text format (appended to /metrics).
#pragma once

#include <string>

#include "engine/engine.h"
#include "topo/pd_decode.h"
#include "topo/pd_endpoint.h"
#include "topo/pd_prefill.h"
#include "transport/transport.h"

namespace tandem::topo {

void render_decode_metrics(std::string& out, const pd_decode_metrics& m, const pd_counters& ep,
                           const transport::peer_stats& t);
void render_prefill_metrics(std::string& out, const pd_prefill_metrics& m, const pd_counters& ep,
                            const transport::peer_stats& t, const engine::engine_stats& eng);

}  // namespace tandem::topo
