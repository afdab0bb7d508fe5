// engine/cpu_engine.h — The engine the server runs on the CPU backend: loads the model from
// config.model.path, lays out the cache pool from the [cache] section, and starts the lockstep
// scheduler with the [scheduler] limits.
#pragma once

#include <memory>

#include "cache/plan_command.h"
#include "core/config.h"
#include "core/liveness.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/model_executor.h"
#include "engine/pool_capacity.h"
#include "engine/scheduler.h"

namespace tandem::model {
class model;
}
namespace tandem::cuda {
struct resident_weights;  // cuda/host/device_weights.h
}

namespace tandem::engine {

// The weights one engine of this process loaded, which the other engine of pd with role both reads
// instead of loading the checkpoint a second time.
struct engine_weights {
    const model::model* cpu = nullptr;  // the CPU model (CPU backend), valid while its executor lives
    std::shared_ptr<const cuda::resident_weights> device;  // the device executor's (owned jointly)
};

// The pieces of one CPU engine before its scheduler starts (pd builds two and wires them).
struct cpu_engine_parts {
    std::unique_ptr<model_executor> executor;
    std::unique_ptr<tandem::engine::capacity> cap;
    std::shared_ptr<pool_sequences> sequences;  // the pool, shared by executor and capacity
    std::shared_ptr<prefix_cache> prefix;       // null when cache.prefix_cache = false
    // What another engine in this process can share (make_cpu_engine_parts' `share_weights_of`,
    // cuda::make_device_engine_parts' `share`).
    engine_weights weights;
};

// Keys read: model.path, model.numerics, backend.threads, cache.kv_dtype, cache.index_k_dtype,
// cache.page_size, cache.memory_bytes, cache.memory_fraction, cache.prefix_cache,
// cache.snapshot_interval_tokens, cache.snapshot_memory_bytes, cache.host_memory_bytes,
// cache.host_load_timeout_ms, cache.test_host_*, scheduler.max_running_requests (also the pool's
// sequence slots). `model_fingerprint` (topo/model_identity.h) goes into the prefix cache's key.
// `copy_thread_beat`: the host tier's copy-thread heartbeat for /health (null: unreported).
// `share_weights_of`: a model already loaded from the same model.path with the same options (pd
// with role both: the prefill engine's) whose weights this engine's model uses instead of loading
// the checkpoint again (model::sharing_weights).
result<cpu_engine_parts> make_cpu_engine_parts(const config& cfg, uint64_t model_fingerprint = 0,
                                               std::shared_ptr<heartbeat> copy_thread_beat = nullptr,
                                               const model::model* share_weights_of = nullptr);

// The prefix cache over `seqs`'s pool (null when cache.prefix_cache = false), with its host tier
// when cache.host_memory_bytes > 0. Shared by the CPU and the device engine: the cache reaches
// pool bytes only through page_pool::read_bytes / write_bytes, so a device arena works too.
result<std::shared_ptr<prefix_cache>> make_prefix_cache(const config& cfg, const cache::cache_plan& plan,
                                                        std::shared_ptr<pool_sequences> seqs,
                                                        uint64_t model_fingerprint,
                                                        std::shared_ptr<heartbeat> copy_beat);

// The [scheduler] limits: max_running_requests, max_queued_requests, max_prefill_tokens,
// max_context_tokens, queue_timeout_ms; and [verify] (sample_rate, max_inflight,
// max_tokens_per_second, max_chunk_tokens). `beat` is the loop's heartbeat (null: a private one).
scheduler_options scheduler_options_from(const config& cfg, std::shared_ptr<heartbeat> beat);

// Parts + scheduler. When `liveness` is given, the scheduler loop registers its heartbeat there
// as "scheduler" (so /health sees a stall).
result<std::unique_ptr<engine>> make_cpu_engine(const config& cfg,
                                                liveness_registry* liveness = nullptr,
                                                uint64_t model_fingerprint = 0);

}  // namespace tandem::engine
