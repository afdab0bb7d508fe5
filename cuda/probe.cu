// cuda/probe.cu — Finds GPUs and NCCL at run time, and proves the toolchain with a real kernel.
// A machine without a GPU (or driver) is normal: the probe reports why and tandem falls back to
// the CPU backend.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "core/gpu_probe.h"

namespace tandem {
namespace {

// y[i] = a * x[i] + y[i], one element per thread; the grid covers n with int64 indices.
__global__ void saxpy_kernel(int64_t n, float a, const float* x, float* y) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

std::string describe(cudaError_t err) { return std::string(cudaGetErrorString(err)); }

}  // namespace

gpu_info gpu_probe() {
    gpu_info info;
    info.built_with_cuda = true;
    ncclGetVersion(&info.nccl_version);
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        info.reason = err != cudaSuccess ? "no usable GPU: " + describe(err) : "no GPU present";
        return info;
    }
    info.device_count = count;
    for (int d = 0; d < count; ++d) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
        if (d > 0) info.devices += ", ";
        info.devices += std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                        std::to_string(prop.minor) + ", " +
                        std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
    }
    return info;
}

status gpu_self_test() {
    gpu_info info = gpu_probe();
    if (info.device_count == 0) return make_error(error_code::unavailable, info.reason);
    const int64_t n = 1 << 20;
    std::vector<float> x(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i % 1000) * 0.5f;
        y[i] = static_cast<float>(i % 7);
    }
    float *dx = nullptr, *dy = nullptr;
    size_t bytes = n * sizeof(float);
    cudaError_t err = cudaMalloc(&dx, bytes);
    if (err == cudaSuccess) err = cudaMalloc(&dy, bytes);
    if (err == cudaSuccess) err = cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        saxpy_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(n, 2.0f, dx, dy);
        err = cudaGetLastError();
    }
    std::vector<float> out(n);
    if (err == cudaSuccess) err = cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(dy);
    if (err != cudaSuccess) return make_error(error_code::internal, "CUDA self-test: " + describe(err));
    for (int64_t i = 0; i < n; ++i) {
        if (out[i] != 2.0f * x[i] + y[i]) {
            return make_error(error_code::internal, "CUDA self-test: wrong result at " + std::to_string(i));
        }
    }
    return status::ok();
}

}  // namespace tandem
