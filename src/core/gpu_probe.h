// core/gpu_probe.h — What the CUDA backend can do on this machine. Implemented by cuda/probe.cu
// when tandem is built with CUDA, and by gpu_probe_none.cpp otherwise, so callers never need
// an #ifdef.
#pragma once

#include <string>

#include "core/status.h"

namespace tandem {

struct gpu_info {
    bool built_with_cuda = false;
    int device_count = 0;
    std::string devices;  // "NVIDIA H200 (sm_90, 139 GiB)", comma-separated
    std::string reason;   // why no GPU can be used, when device_count == 0
    int nccl_version = 0; // e.g. 22703; 0 when NCCL is not linked
};

gpu_info gpu_probe();

// Runs a real kernel on device 0 and checks its result against the CPU.
status gpu_self_test();

}  // namespace tandem
