// engine/cpu_engine.h — The engine the server runs on the CPU backend: loads the model from
// config.model.path, lays out the cache pool from the [cache] section, and starts the lockstep
// scheduler with the [scheduler] limits.
#pragma once

#include <memory>

#include "core/config.h"
#include "core/liveness.h"
#include "core/status.h"
#include "engine/engine.h"

namespace tandem::engine {

// Keys read: model.path, model.numerics, backend.threads, cache.kv_dtype, cache.index_k_dtype,
// cache.page_size, cache.memory_bytes, cache.memory_fraction, scheduler.max_running_requests
// (also the pool's sequence slots), scheduler.max_queued_requests, scheduler.max_prefill_tokens,
// scheduler.max_context_tokens, scheduler.queue_timeout_ms. When `liveness` is given, the
// scheduler loop registers its heartbeat there as "scheduler" (so /health sees a stall).
result<std::unique_ptr<engine>> make_cpu_engine(const config& cfg,
                                                liveness_registry* liveness = nullptr);

}  // namespace tandem::engine
