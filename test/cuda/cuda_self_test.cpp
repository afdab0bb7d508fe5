// The CUDA check: runs a real kernel on the GPU and compares with the CPU. On a machine without a
// GPU (or a build without CUDA) it exits 77, which meson reports as SKIP — never as a pass.
#include <cstdio>

#include "core/gpu_probe.h"

int main() {
    tandem::gpu_info info = tandem::gpu_probe();
    if (info.device_count == 0) {
        std::printf("SKIP: %s\n", info.reason.c_str());
        return 77;
    }
    std::printf("GPUs: %s; NCCL %d\n", info.devices.c_str(), info.nccl_version);
    tandem::status st = tandem::gpu_self_test();
    std::printf("%s\n", st ? "CUDA self-test passed" : st.message().c_str());
    return st ? 0 : 1;
}
