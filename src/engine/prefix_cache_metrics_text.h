// engine/prefix_cache_metrics_text.h — An engine's prefix-cache counters as Prometheus text.
//
// Both the single engine (`tandem_prefix_cache_*`) and the pd prefill engine
// (`tandem_pd_prefill_cache_*`) report their cache with these families; the writer's prefix
// tells them apart.
#pragma once

#include "core/prometheus_text.h"
#include "engine/engine.h"

namespace tandem::engine {

// Appends the cache families (host-tier ones only when the host tier is on) to `w`, whose
// prefix names the cache: "tandem_prefix_cache_" writes `tandem_prefix_cache_hit_tokens_total`.
void render_prefix_cache_metrics(prometheus_text w, const prefix_cache_counters& p);

}  // namespace tandem::engine
