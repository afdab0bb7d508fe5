#include "engine/cpu_engine.h"

#include "cache/plan_command.h"
#include "engine/cpu_executor.h"
#include "model/model.h"

namespace tandem::engine {

scheduler_options scheduler_options_from(const config& cfg, std::shared_ptr<heartbeat> beat) {
    scheduler_options so;
    so.max_running_requests = cfg.scheduler.max_running_requests;
    so.max_queued_requests = cfg.scheduler.max_queued_requests;
    so.max_prefill_tokens = cfg.scheduler.max_prefill_tokens;
    so.max_context_tokens = cfg.scheduler.max_context_tokens;
    so.queue_timeout_ms = cfg.scheduler.queue_timeout_ms;
    so.loop_heartbeat = std::move(beat);
    so.verify.sample_rate = cfg.verify.sample_rate;
    so.verify.max_inflight = cfg.verify.max_inflight;
    so.verify.max_tokens_per_second = cfg.verify.max_tokens_per_second;
    so.verify.max_chunk_tokens = cfg.verify.max_chunk_tokens;
    return so;
}

result<cpu_engine_parts> make_cpu_engine_parts(const config& cfg) {
    result<model::model_options> mo =
        model::model_options_from(cfg.model.numerics, cfg.backend.threads);
    if (!mo) return mo.error();
    result<std::unique_ptr<model::model>> m = model::model::load(cfg.model.path, *mo);
    if (!m) return m.error().with_context("loading the model from model.path");

    result<cache::layout_options> lo = cache::layout_options_from(cfg);
    if (!lo) return lo.error();
    result<int64_t> budget =
        cache::resolve_memory_budget(cfg.cache.memory_bytes, cfg.cache.memory_fraction);
    if (!budget) return budget.error();
    result<cache::cache_plan> plan = cache::make_cache_plan(
        (*m)->config(), cfg.model.path, *lo, *budget, cfg.scheduler.max_running_requests);
    if (!plan) return plan.error();
    result<std::unique_ptr<cache::page_pool>> pool = cache::page_pool::create(
        plan->layout, cache::pool_options{plan->memory_bytes, plan->split.num_slots});
    if (!pool) return pool.error().with_context("creating the cache pool");

    cpu_engine_parts parts;
    parts.sequences = std::make_shared<pool_sequences>(std::move(pool.value()));
    parts.executor = std::make_unique<cpu_executor>(std::move(m.value()), parts.sequences);
    parts.cap = std::make_unique<pool_capacity>(parts.sequences);
    return parts;
}

result<std::unique_ptr<engine>> make_cpu_engine(const config& cfg, liveness_registry* liveness) {
    result<cpu_engine_parts> parts = make_cpu_engine_parts(cfg);
    if (!parts) return parts.error();
    std::unique_ptr<engine> eng = std::make_unique<scheduler>(
        std::move(parts->executor), std::move(parts->cap),
        scheduler_options_from(cfg, liveness ? liveness->add("scheduler") : nullptr));
    return eng;
}

}  // namespace tandem::engine
