#include "engine/cpu_engine.h"

#include <fmt/format.h>

#include "cache/host_tier.h"
#include "cache/plan_command.h"
#include "cache/snapshot.h"
#include "core/log.h"
#include "engine/cpu_executor.h"
#include "model/model.h"

namespace tandem::engine {

scheduler_options scheduler_options_from(const config& cfg, std::shared_ptr<heartbeat> beat) {
    scheduler_options so;
    so.max_running_requests = cfg.scheduler.max_running_requests;
    so.max_queued_requests = cfg.scheduler.max_queued_requests;
    so.max_prefill_tokens = cfg.scheduler.max_prefill_tokens;
    so.max_prompt_logprob_tokens = cfg.scheduler.max_prompt_logprob_tokens;
    so.max_context_tokens = cfg.scheduler.max_context_tokens;
    so.queue_timeout_ms = cfg.scheduler.queue_timeout_ms;
    so.loop_heartbeat = std::move(beat);
    so.verify.sample_rate = cfg.verify.sample_rate;
    so.verify.max_inflight = cfg.verify.max_inflight;
    so.verify.max_tokens_per_second = cfg.verify.max_tokens_per_second;
    so.verify.max_chunk_tokens = cfg.verify.max_chunk_tokens;
    return so;
}

namespace {

cache::host_tier_test_hooks host_test_hooks(const config& cfg) {
    cache::host_tier_test_hooks h;
    h.delay_ms = cfg.cache.test_host_load_delay_ms;
    h.delay_kind = cfg.cache.test_host_load_delay_kind == "all" ? std::string()
                                                                : cfg.cache.test_host_load_delay_kind;
    h.delay_layer = static_cast<int32_t>(cfg.cache.test_host_load_delay_layer);
    h.sentinel = cfg.cache.test_host_sentinel;
    h.skip_gate = cfg.cache.test_host_skip_gate;
    h.evict_on_release = cfg.cache.test_host_evict_on_release;
    return h;
}

result<std::unique_ptr<cache::host_tier>> make_host_tier(const config& cfg, pool_sequences& seqs,
                                                         std::shared_ptr<heartbeat> beat) {
    if (cfg.cache.host_memory_bytes <= 0) return std::unique_ptr<cache::host_tier>();
    seqs.load_timeout_ms = cfg.cache.host_load_timeout_ms;
    cache::host_tier_options ho{cfg.cache.host_memory_bytes, std::move(beat), host_test_hooks(cfg)};
    result<std::unique_ptr<cache::host_tier>> host = cache::host_tier::create(seqs.pool(), std::move(ho));
    if (!host) return host.error();
    const cache::host_tier_stats hs = (*host)->stats();
    const int64_t page = seqs.pool().layout().page_size();
    TANDEM_LOG_INFO("prefix cache host tier: {:.1f} MiB = {} pages ({} tokens) of history, "
                    "written through on a copy thread, loaded back layer by layer",
                    static_cast<double>(hs.bytes_total) / (1 << 20), hs.pages_total,
                    hs.pages_total * page);
    if (cfg.cache.test_host_load_delay_ms > 0 || cfg.cache.test_host_sentinel ||
        cfg.cache.test_host_skip_gate || cfg.cache.test_host_evict_on_release) {
        TANDEM_LOG_WARN("prefix cache host tier: TEST switches on (cache.test_host_*): delay {} ms "
                        "({}, layer {}), sentinel {}, skip gate {}, evict on release {} — not for "
                        "production",
                        cfg.cache.test_host_load_delay_ms, cfg.cache.test_host_load_delay_kind,
                        cfg.cache.test_host_load_delay_layer, cfg.cache.test_host_sentinel,
                        cfg.cache.test_host_skip_gate, cfg.cache.test_host_evict_on_release);
    }
    return host;
}

}  // namespace

result<std::shared_ptr<prefix_cache>> make_prefix_cache(const config& cfg,
                                                        const cache::cache_plan& plan,
                                                        std::shared_ptr<pool_sequences> seqs,
                                                        uint64_t model_fingerprint,
                                                        std::shared_ptr<heartbeat> copy_beat) {
    if (!cfg.cache.prefix_cache) return std::shared_ptr<prefix_cache>();
    const int64_t page = plan.layout.page_size();
    if (cfg.cache.snapshot_interval_tokens % page != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("cache.snapshot_interval_tokens: {} is not a multiple of "
                                      "cache.page_size ({})",
                                      cfg.cache.snapshot_interval_tokens, page));
    }
    prefix_cache_options o;
    o.cache_key = prefix_cache_key(plan.layout.fingerprint(), model_fingerprint,
                                   model::numerics_identity(cfg.model.numerics, cfg.backend.cpu_matmul));
    o.snapshot_interval_tokens = cfg.cache.snapshot_interval_tokens;
    o.snapshot_budget_bytes = cfg.cache.snapshot_memory_bytes > 0 ? cfg.cache.snapshot_memory_bytes
                                                                  : plan.memory_bytes / 8;
    const int64_t snap = cache::snapshot_payload_bytes(plan.layout, page) +
                         static_cast<int64_t>(sizeof(cache::snapshot_header));
    result<std::unique_ptr<cache::host_tier>> host = make_host_tier(cfg, *seqs, std::move(copy_beat));
    if (!host) return host.error();
    TANDEM_LOG_INFO("prefix cache: on; up to {} pages ({} tokens) of shared history in the pool, "
                    "snapshots up to {:.1f} MiB ({} B each, about {} of them); extra snapshot "
                    "every {} prefill tokens; host tier {}",
                    plan.split.num_pages, plan.split.tokens,
                    static_cast<double>(o.snapshot_budget_bytes) / (1 << 20), snap,
                    o.snapshot_budget_bytes / std::max<int64_t>(snap, 1),
                    o.snapshot_interval_tokens > 0 ? fmt::format("{}", o.snapshot_interval_tokens)
                                                   : std::string("(never)"),
                    *host ? fmt::format("{} pages ({} tokens)", (*host)->stats().pages_total,
                                        (*host)->stats().pages_total * page)
                          : std::string("off"));
    return std::make_shared<prefix_cache>(std::move(seqs), o, std::move(host.value()));
}

namespace {

result<std::unique_ptr<model::model>> load_model(const config& cfg, const model::model* share_weights_of) {
    if (share_weights_of) {  // same config, so the same options as the model it shares with
        TANDEM_LOG_INFO("weights: shared with the other engine in this process (no second copy)");
        return share_weights_of->sharing_weights();
    }
    result<model::model_options> mo =
        model::model_options_from(cfg.model.numerics, cfg.backend.threads, cfg.model.weight_pages,
                                  cfg.backend.cpu_matmul);
    if (!mo) return mo.error();
    result<std::unique_ptr<model::model>> m = model::model::load(cfg.model.path, *mo);
    if (!m) return m.error().with_context("loading the model from model.path");
    return m;
}

}  // namespace

result<cpu_engine_parts> make_cpu_engine_parts(const config& cfg, uint64_t model_fingerprint,
                                               std::shared_ptr<heartbeat> copy_thread_beat,
                                               const model::model* share_weights_of) {
    result<std::unique_ptr<model::model>> m = load_model(cfg, share_weights_of);
    if (!m) return m.error();

    result<cache::layout_options> lo = cache::layout_options_from(cfg);
    if (!lo) return lo.error();
    result<cache::layout_spec> layout = cache::layout_spec::create((*m)->config(), *lo);
    if (!layout) return layout.error();
    result<cache::memory_budget> budget = cache::resolve_memory_budget(cfg, (*m)->config(), *layout);
    if (!budget) return budget.error();
    // The step buffers are in the plan summary the server logged before loading (api/serve.cpp).
    result<cache::cache_plan> plan = cache::make_cache_plan(
        (*m)->config(), cfg.model.path, *layout, budget->pool_bytes, cfg.scheduler.max_running_requests);
    if (!plan) return plan.error();
    result<std::unique_ptr<cache::page_pool>> pool = cache::page_pool::create(
        plan->layout, cache::pool_options{plan->memory_bytes, plan->split.num_slots});
    if (!pool) return pool.error().with_context("creating the cache pool");

    cpu_engine_parts parts;
    parts.sequences = std::make_shared<pool_sequences>(std::move(pool.value()));
    parts.weights.cpu = m->get();
    parts.executor = std::make_unique<cpu_executor>(std::move(m.value()), parts.sequences);
    result<std::shared_ptr<prefix_cache>> prefix =
        make_prefix_cache(cfg, *plan, parts.sequences, model_fingerprint, std::move(copy_thread_beat));
    if (!prefix) return prefix.error();
    parts.prefix = std::move(prefix.value());
    parts.cap = std::make_unique<pool_capacity>(parts.sequences, parts.prefix);
    return parts;
}

result<std::unique_ptr<engine>> make_cpu_engine(const config& cfg, liveness_registry* liveness,
                                                uint64_t model_fingerprint) {
    const bool host = cfg.cache.prefix_cache && cfg.cache.host_memory_bytes > 0;
    result<cpu_engine_parts> parts = make_cpu_engine_parts(
        cfg, model_fingerprint,
        liveness && host ? liveness->add("host-tier copy thread") : nullptr);
    if (!parts) return parts.error();
    scheduler_options so = scheduler_options_from(cfg, liveness ? liveness->add("scheduler") : nullptr);
    so.prefix = parts->prefix;
    std::unique_ptr<engine> eng = std::make_unique<scheduler>(
        std::move(parts->executor), std::move(parts->cap), std::move(so));
    return eng;
}

}  // namespace tandem::engine
