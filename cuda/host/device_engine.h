// cuda/host/device_engine.h — The engine the server runs with backend.device = "cuda": the same
// lockstep scheduler, capacity and sampler as the CPU engine (engine/cpu_engine.h), over the device
// executor, with the cache pool's arena in GPU memory (cache::page_pool::create_external).
//
// Not yet on the GPU path, and refused or switched off with a log line saying so: the prefix
// cache (its snapshots and host tier copy pool bytes with memcpy, which a device arena forbids)
// and pd (device-to-device transfers behind the transport are not built).
#pragma once

#include <memory>

#include "core/config.h"
#include "core/liveness.h"
#include "engine/engine.h"

namespace tandem::cuda {

// Keys read: as engine::make_cpu_engine (model.path, model.numerics, [cache], [scheduler], [verify]).
result<std::unique_ptr<engine::engine>> make_device_engine(const config& cfg, liveness_registry* liveness);

}  // namespace tandem::cuda
