// cuda/host/cuda_startup.h — What the server does with backend.device at startup: resolve it
// (device_choice.h), and for backend.device = "cuda" on a machine with a GPU run phase 0 first
// (plan the device memory from the model and the [cache] budget, refuse clearly when it does not
// fit, upload the weights as stored and check them, then free it all again) so the log says which
// GPU and how many bytes go where, and a model or pool that cannot fit is refused before serving.
// The choice itself (device_choice.h): "cuda" → the device executor, which the engine then builds
// with its own weight upload and pool slab (device_engine.h); "auto" → CUDA only once the device
// forward has passed its GPU check (cuda_capability::gpu_verified), else the CPU with the reason.
// backend.test_emulate_device (testing only) skips the probe and phase 0 and serves "cuda" over
// the host emulation.
#pragma once

#include "core/config.h"
#include "core/status.h"
#include "cuda/host/device_choice.h"

namespace tandem::cuda {

// Keys read: backend.device, model.path, [cache] (layout and budget), scheduler.max_running_requests,
// scheduler.max_prefill_tokens.
result<device_choice> resolve_backend_at_startup(const config& cfg);

}  // namespace tandem::cuda
