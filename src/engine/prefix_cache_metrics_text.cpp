#include "engine/prefix_cache_metrics_text.h"

namespace tandem::engine {

void render_prefix_cache_metrics(prometheus_text w, const prefix_cache_counters& p) {
    using enum metric_type;
    w.families({
        {counter, "lookup_tokens_total", "Tokens admitted requests needed (prompt + earlier output)",
         p.lookup_tokens},
        {counter, "hit_tokens_total",
         "Of those, tokens restored from the prefix cache instead of computed", p.hit_tokens},
    });
    const double ratio = p.lookup_tokens > 0 ? static_cast<double>(p.hit_tokens) /
                                                   static_cast<double>(p.lookup_tokens)
                                             : 0.0;
    w.ratio("hit_ratio", "hit tokens / lookup tokens", ratio);
    w.families({
        {gauge, "pages", "Pool pages the prefix cache holds", p.cached_pages},
        {gauge, "snapshots", "Boundary snapshots held", p.snapshots},
        {gauge, "snapshot_bytes", "Bytes of boundary snapshots held", p.snapshot_bytes},
        {counter, "evicted_pages_total", "History pages evicted (history family)", p.evicted_pages},
        {counter, "evicted_snapshots_total", "Snapshots evicted (snapshot family)",
         p.evicted_snapshots},
        {counter, "restore_failures_total",
         "Snapshots that failed verification (the request recomputed instead)", p.restore_failures},
    });
    if (!p.host_enabled) return;
    w.families({
        {gauge, "host_bytes_total", "Host-tier capacity in bytes (whole pages)", p.host_bytes_total},
        {gauge, "host_bytes_used", "Host-tier bytes holding history pages", p.host_bytes_used},
        {counter, "host_loaded_pages_total",
         "Pages loaded back from the host tier into the pool (host hits)", p.host_loaded_pages},
        {counter, "evicted_to_host_total", "Pool copies evicted while their host copy stayed",
         p.evicted_to_host},
        {counter, "host_evictions_total", "Host copies dropped (host tier full, flush)",
         p.host_evictions},
    });
    w.histogram("host_load_seconds",
                "Host-tier load latency: queued to last layer landed (pages + snapshot)",
                p.host_load_seconds);
}

}  // namespace tandem::engine
