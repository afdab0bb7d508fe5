#include "cuda/host/device_engine.h"

#include <fmt/format.h>

#include "cache/plan_command.h"
#include "core/log.h"
#include "cuda/host/device_executor.h"
#include "engine/pool_capacity.h"
#include "engine/scheduler.h"

namespace tandem::cuda {

namespace {

result<std::unique_ptr<device_runtime>> make_runtime(const config& cfg) {
    if (cfg.backend.test_emulate_device) return make_emulated_runtime();
    return make_cuda_runtime();
}

// The pool's slab and the runtime instance that copies its bytes, owned by the pool itself (its
// arena functions hold them): the prefix cache's host-tier thread and pd transfers may copy pool
// bytes until the last pool user is gone, which can be after the executor (and its own runtime
// instance) was destroyed. Both instances address the same space (one host, or GPU 0's context).
// Ordering on a GPU: upload/download are cudaMemcpy on the legacy default stream, which the
// forward's kernels also use (device_runtime.cu k_stream = 0; nothing is built with
// --default-stream per-thread), so a kernel launched after an upload returned — from any thread —
// reads the uploaded bytes, and a download waits for the kernels before it. That is what lets the
// host tier's end_layer(l) after its uploads mean "landed" for the gate.

struct pool_arena_owner {
    std::unique_ptr<device_runtime> ops;
    device_buffer slab;  // declared after ops: freed before it
};

// Pools of one process on one device can copy from each other (pd on one device): the runtime's
// device-to-device copy (cudaMemcpyAsync D2D on the legacy stream, memmove in the emulation), and
// the device XXH3 checks a span where it lies. One space for GPU 0 of this process, another for the
// host emulation (never both in one deployment: backend.test_emulate_device is one setting).
constexpr uint64_t k_space_gpu0 = 0x67707530, k_space_emulated = 0x656d756c;

cache::external_arena arena_over(std::shared_ptr<pool_arena_owner> owner, bool emulated) {
    std::byte* base = owner->slab.get<std::byte>();
    const int64_t bytes = owner->slab.bytes();
    cache::external_arena a{
        base, bytes,
        [owner](std::byte* dst, const std::byte* src, int64_t n) { return owner->ops->upload(dst, src, n); },
        [owner](std::byte* dst, const std::byte* src, int64_t n) { return owner->ops->download(dst, src, n); }};
    a.copy = [owner](std::byte* dst, const std::byte* src, int64_t n) { return owner->ops->copy(dst, src, n); };
    a.checksum = [owner](const std::byte* src, int64_t n) { return owner->ops->checksum(src, n); };
    a.space = emulated ? k_space_emulated : k_space_gpu0;
    return a;
}

result<std::shared_ptr<pool_arena_owner>> alloc_pool_arena(const config& cfg, int64_t bytes) {
    auto owner = std::make_shared<pool_arena_owner>();
    result<std::unique_ptr<device_runtime>> ops = make_runtime(cfg);
    if (!ops) return ops.error().with_context("backend.device = \"cuda\"");
    owner->ops = std::move(ops.value());
    result<device_buffer> slab = device_buffer::alloc(*owner->ops, bytes, "the cache pool on the device");
    if (!slab) return slab.error().with_context(fmt::format("allocating the {:.1f} MiB cache pool (lower cache.memory_bytes)",
                                                            double(bytes) / (1 << 20)));
    owner->slab = std::move(slab.value());
    return owner;
}

}  // namespace

result<engine::cpu_engine_parts> make_device_engine_parts(const config& cfg, uint64_t model_fingerprint,
                                                          std::shared_ptr<heartbeat> copy_thread_beat,
                                                          std::shared_ptr<const resident_weights> share) {
    result<model::model_options> mo =
        model::model_options_from(cfg.model.numerics, cfg.backend.threads, cfg.model.weight_pages);
    if (!mo) return mo.error();
    result<cache::cache_plan> plan = cache::make_cache_plan(cfg);
    if (!plan) return plan.error();
    result<std::unique_ptr<device_runtime>> ops = make_runtime(cfg);
    if (!ops) return ops.error().with_context("backend.device = \"cuda\"");
    const int64_t arena_bytes = cache::pool_geometry(plan->layout, plan->split.num_pages, plan->split.num_slots).total_bytes();
    result<std::shared_ptr<pool_arena_owner>> arena = alloc_pool_arena(cfg, arena_bytes);
    if (!arena) return arena.error();
    result<std::unique_ptr<cache::page_pool>> pool = cache::page_pool::create_external(
        plan->layout, cache::pool_options{plan->memory_bytes, plan->split.num_slots},
        arena_over(*arena, cfg.backend.test_emulate_device));
    if (!pool) return pool.error().with_context("creating the cache pool on the device");
    engine::cpu_engine_parts parts;
    parts.sequences = std::make_shared<engine::pool_sequences>(std::move(pool.value()));
    const std::string where = (*ops)->describe();
    const bool shared = share != nullptr;
    result<std::unique_ptr<device_executor>> ex = device_executor::create(
        std::move(ops.value()), device_buffer{}, cfg.model.path, mo->numerics, parts.sequences, std::move(share));
    if (!ex) return ex.error().with_context("model.path");
    TANDEM_LOG_INFO("CUDA executor on {}: weights {:.1f} MiB resident as stored{}, cache pool {:.1f} MiB ({} pages, {} sequence slots)",
                    where, double((*ex)->weight_bytes()) / (1 << 20),
                    shared ? " (shared with the other engine in this process, no second copy)" : "",
                    double(arena_bytes) / (1 << 20), plan->split.num_pages, plan->split.num_slots);
    parts.weights.device = (*ex)->weights();
    parts.executor = std::move(ex.value());
    result<std::shared_ptr<engine::prefix_cache>> prefix =
        engine::make_prefix_cache(cfg, *plan, parts.sequences, model_fingerprint, std::move(copy_thread_beat));
    if (!prefix) return prefix.error();
    parts.prefix = std::move(prefix.value());
    parts.cap = std::make_unique<engine::pool_capacity>(parts.sequences, parts.prefix);
    return parts;
}

result<std::unique_ptr<engine::engine>> make_device_engine(const config& cfg, liveness_registry* liveness,
                                                           uint64_t model_fingerprint) {
    const bool host = cfg.cache.prefix_cache && cfg.cache.host_memory_bytes > 0;
    result<engine::cpu_engine_parts> parts =
        make_device_engine_parts(cfg, model_fingerprint, liveness && host ? liveness->add("host-tier copy thread") : nullptr);
    if (!parts) return parts.error();
    engine::scheduler_options so = engine::scheduler_options_from(cfg, liveness ? liveness->add("scheduler") : nullptr);
    so.prefix = parts->prefix;
    return std::unique_ptr<engine::engine>(
        std::make_unique<engine::scheduler>(std::move(parts->executor), std::move(parts->cap), std::move(so)));
}

}  // namespace tandem::cuda
