#include "cuda/host/device_engine.h"

#include <fmt/format.h>

#include "cache/plan_command.h"
#include "core/log.h"
#include "cuda/host/device_executor.h"
#include "engine/cpu_engine.h"
#include "engine/pool_capacity.h"
#include "engine/scheduler.h"

namespace tandem::cuda {

result<std::unique_ptr<engine::engine>> make_device_engine(const config& cfg, liveness_registry* liveness) {
    result<model::model_options> mo = model::model_options_from(cfg.model.numerics, cfg.backend.threads);
    if (!mo) return mo.error();
    result<cache::cache_plan> plan = cache::make_cache_plan(cfg);
    if (!plan) return plan.error();
    if (cfg.cache.prefix_cache)
        TANDEM_LOG_WARN("backend.device = \"cuda\": cache.prefix_cache is not supported on the GPU yet; serving without it");
    result<std::unique_ptr<device_runtime>> ops = make_cuda_runtime();
    if (!ops) return ops.error().with_context("backend.device = \"cuda\"");
    const int64_t arena_bytes = cache::pool_geometry(plan->layout, plan->split.num_pages, plan->split.num_slots).total_bytes();
    result<device_buffer> slab = device_buffer::alloc(**ops, arena_bytes, "the cache pool on the GPU");
    if (!slab) return slab.error().with_context(fmt::format("allocating the {:.1f} MiB cache pool (lower cache.memory_bytes)",
                                                            double(arena_bytes) / (1 << 20)));
    device_runtime* raw = ops->get();
    cache::external_arena ext{slab->get<std::byte>(), arena_bytes,
                              [raw](std::byte* dst, const std::byte* src, int64_t n) { return raw->upload(dst, src, n); }};
    result<std::unique_ptr<cache::page_pool>> pool =
        cache::page_pool::create_external(plan->layout, cache::pool_options{plan->memory_bytes, plan->split.num_slots}, ext);
    if (!pool) return pool.error().with_context("creating the cache pool on the GPU");
    auto seqs = std::make_shared<engine::pool_sequences>(std::move(pool.value()));
    const std::string gpu = (*ops)->describe();
    result<std::unique_ptr<device_executor>> ex = device_executor::create(std::move(ops.value()), std::move(slab.value()), cfg.model.path, mo->numerics, seqs);
    if (!ex) return ex.error().with_context("model.path");
    TANDEM_LOG_INFO("CUDA executor on {}: weights {:.1f} MiB resident as stored, cache pool {:.1f} MiB ({} pages, {} sequence slots)",
                    gpu, double((*ex)->weight_bytes()) / (1 << 20), double(arena_bytes) / (1 << 20), plan->split.num_pages,
                    plan->split.num_slots);
    auto cap = std::make_unique<engine::pool_capacity>(seqs, nullptr);
    engine::scheduler_options so = engine::scheduler_options_from(cfg, liveness ? liveness->add("scheduler") : nullptr);
    return std::unique_ptr<engine::engine>(std::make_unique<engine::scheduler>(std::move(ex.value()), std::move(cap), std::move(so)));
}

}  // namespace tandem::cuda
