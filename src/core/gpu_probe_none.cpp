#include "core/gpu_probe.h"

namespace tandem {

gpu_info gpu_probe() {
    gpu_info info;
    info.reason = "tandem was built without CUDA (meson option cuda=disabled or nvcc not found)";
    return info;
}

status gpu_self_test() { return make_error(error_code::unavailable, gpu_probe().reason); }

}  // namespace tandem
