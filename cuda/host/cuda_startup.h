// cuda/host/cuda_startup.h — What the server does with backend.device at startup: resolve it
// (device_choice.h), and for backend.device = "cuda" on a machine with a GPU run phase 0 first
// (plan the device memory from the model and the [cache] budget, refuse clearly when it does not
// fit, upload the weights as stored and check them) so the log says which GPU and how many bytes
// went where — then refuse, naming what is missing, while the CUDA forward pass is not built.
#pragma once

#include "core/config.h"
#include "core/status.h"
#include "cuda/host/device_choice.h"

namespace tandem::cuda {

// Keys read: backend.device, model.path, [cache] (layout and budget), scheduler.max_running_requests,
// scheduler.max_prefill_tokens.
result<device_choice> resolve_backend_at_startup(const config& cfg);

}  // namespace tandem::cuda
