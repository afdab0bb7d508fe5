// cuda/cuda_check.h — (cuda/ internal) the error model: every CUDA and NCCL call's result becomes
// a tandem status naming what was attempted, so nothing throws or aborts across the backend.
// No fmt here: its headers do not compile under nvcc.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/status.h"

namespace tandem::cuda {

inline status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return status::ok();
    // Out of memory is the user's sizing problem; everything else is the device or driver.
    const error_code code = e == cudaErrorMemoryAllocation ? error_code::out_of_range
                            : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? error_code::unavailable
                                                                                            : error_code::io_error;
    return make_error(code, std::string(what) + ": CUDA error " + std::to_string(static_cast<int>(e)) + " (" +
                                cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")");
}

inline status nccl_status(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return status::ok();
    return make_error(error_code::io_error, std::string(what) + ": NCCL error " + std::to_string(static_cast<int>(r)) +
                                                " (" + ncclGetErrorString(r) + ")");
}

// A kernel launch: the launch error, then (synchronous ops) the execution error.
inline status cuda_launch_status(const char* what) { return cuda_status(cudaGetLastError(), what); }

}  // namespace tandem::cuda

#define TANDEM_CUDA_TRY(expr, what)                                      \
    do {                                                                 \
        ::tandem::status tandem_cuda_st_ = ::tandem::cuda::cuda_status((expr), (what)); \
        if (!tandem_cuda_st_) return tandem_cuda_st_;                    \
    } while (0)
