#include "cuda/host/device_choice.h"

#include "cuda/host/device_runtime.h"

namespace tandem::cuda {

cuda_capability cuda_backend_capability() {
    cuda_capability c;
    c.forward_ready = cuda_forward_built();
    c.gpu_verified = false;  // flip only with a green tools/gpu_check.sh run recorded in the README
    c.missing = c.forward_ready
                    ? "the CUDA forward has not yet passed its GPU check (tools/gpu_check.sh tier 5: greedy tokens "
                      "equal to the CPU's); set backend.device = \"cuda\" to use it anyway"
                    : "this build has no CUDA forward (built without nvcc: meson option cuda)";
    return c;
}

result<device_choice> choose_backend_device(std::string_view configured, const gpu_info& gpu,
                                            const cuda_capability& cap) {
    const bool have_gpu = gpu.device_count > 0;
    if (configured == "cpu") return device_choice{backend_device::cpu, "backend.device = \"cpu\""};
    if (configured == "cuda") {
        if (!have_gpu)
            return make_error(error_code::unavailable,
                              "backend.device = \"cuda\" but no GPU can be used: " + gpu.reason);
        if (!cap.forward_ready)
            return make_error(error_code::unavailable,
                              "backend.device = \"cuda\": " + cap.missing + "; use \"cpu\" or \"auto\"");
        return device_choice{backend_device::cuda, "backend.device = \"cuda\" on " + gpu.devices +
                                                       (cap.gpu_verified ? "" : " (its GPU check has not run green yet)")};
    }
    if (configured == "auto") {
        if (!have_gpu) return device_choice{backend_device::cpu, "auto: CPU, because " + gpu.reason};
        if (!cap.forward_ready || !cap.gpu_verified)
            return device_choice{backend_device::cpu,
                                 "auto: CPU although a GPU is present (" + gpu.devices + "), because " + cap.missing};
        return device_choice{backend_device::cuda, "auto: CUDA on " + gpu.devices};
    }
    return make_error(error_code::invalid_argument,
                      "backend.device: '" + std::string(configured) + "' is not one of auto, cpu, cuda");
}

}  // namespace tandem::cuda
