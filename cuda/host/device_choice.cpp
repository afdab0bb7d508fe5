#include "cuda/host/device_choice.h"

namespace tandem::cuda {

cuda_capability cuda_backend_capability() {
    cuda_capability c;
    c.forward_ready = false;
    c.missing =
        "the CUDA forward pass is not built yet (phase 0 bring-up and the first phase-1 kernels exist; "
        "the executor over the device pool, attention over pool pages, compressors, indexer and MoE "
        "kernels do not)";
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
        return device_choice{backend_device::cuda, "backend.device = \"cuda\" on " + gpu.devices};
    }
    if (configured == "auto") {
        if (!have_gpu) return device_choice{backend_device::cpu, "auto: CPU, because " + gpu.reason};
        if (!cap.forward_ready)
            return device_choice{backend_device::cpu,
                                 "auto: CPU although a GPU is present (" + gpu.devices + "), because " + cap.missing};
        return device_choice{backend_device::cuda, "auto: CUDA on " + gpu.devices};
    }
    return make_error(error_code::invalid_argument,
                      "backend.device: '" + std::string(configured) + "' is not one of auto, cpu, cuda");
}

}  // namespace tandem::cuda
