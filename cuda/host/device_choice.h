// cuda/host/device_choice.h — Which backend computes: backend.device ("auto" | "cpu" | "cuda")
// against what the GPU probe found and what the CUDA backend can do today.
//
// Plain C++ (tested in CI without a GPU). The rule, and why:
//   cpu   → the CPU, always.
//   cuda  → the CUDA backend; an error naming the reason when no GPU can be used or this build
//           has no CUDA forward (a user who asked for the GPU must not silently get the CPU).
//   auto  → CUDA only when a GPU is present AND the CUDA forward has passed its GPU check;
//           otherwise the CPU, with the reason logged.
#pragma once

#include <string>
#include <string_view>

#include "core/gpu_probe.h"
#include "core/status.h"

namespace tandem::cuda {

enum class backend_device { cpu, cuda };

struct device_choice {
    backend_device device = backend_device::cpu;
    std::string reason;  // one line for the startup log: why this backend
    // cache.memory_bytes = 0 on a GPU: each engine's pool budget, resolved from the GPU's free
    // memory (cuda_startup.h); 0 when the configured cache.memory_bytes stands.
    int64_t device_pool_bytes = 0;
};

// What the CUDA backend of this build can run. `forward_ready`: the device executor is built
// (a CUDA build); `gpu_verified`: its tier-5 check (tools/gpu_check.sh: greedy tokens equal to
// the CPU's) has passed on a GPU. "cuda" needs the first; "auto" waits for both, so a GPU machine
// keeps serving on the CPU until the GPU path has been seen to agree with it.
struct cuda_capability {
    bool forward_ready = false;
    bool gpu_verified = false;
    std::string missing;  // why "auto" does not pick CUDA (or "cuda" cannot run)
};
cuda_capability cuda_backend_capability();

// Errors (invalid_argument / unavailable) name backend.device and the reason.
result<device_choice> choose_backend_device(std::string_view configured, const gpu_info& gpu,
                                            const cuda_capability& cap);

}  // namespace tandem::cuda
