// cuda/kernel_plumbing.cuh — (cuda/ internal) what every kernels_*.cu shares: the rule the kernels
// keep, and the host-buffer plumbing of their entry points (host/cuda_ops.h).
//
// Correct first: every output element is computed by ONE thread with the reduction order of the
// CPU reference (host/kernel_math.h), so a row's bytes never depend on the batch, its position in
// it, the grid or the SM count (spec §3.5). Parallelism is only over independent outputs — except
// K12 (kernels_topk.cu), whose CTA cooperates through shared histograms and scans: its outputs are
// integer counts and ids, the same whatever order the threads run in. Phase 2
// replaces the inner loops with mma.sync / wgmma tiles that keep the same per-output K order.
// Built with --fmad=false (cuda/meson.build): no silent contraction. The kernels are split into
// files by family only to keep each file small. Each kernel has one launcher (kernel_launch.h:
// device pointers, a stream) that the device executor calls; a host-buffer entry point
// (host/cuda_ops.h) uploads its inputs, calls that launcher on device 0, synchronises and downloads.
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <string>
#include <vector>

#include "cuda/device_resources.h"
#include "cuda/host/cuda_ops.h"
#include "cuda/host/kernel_paths.h"
#include "cuda/host/kernel_views.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

namespace plumbing {

inline status need_gpu() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error
        return make_error(error_code::unavailable, "no usable GPU");
    }
    return cuda_status(cudaSetDevice(0), "selecting GPU 0");
}

template <typename T>
result<device_memory> upload(std::span<const T> host, const char* what) {
    result<device_memory> m = device_memory::alloc(static_cast<int64_t>(host.size_bytes()), what);
    if (!m) return m;
    if (!host.empty()) {
        status st = cuda_status(cudaMemcpy(m->get(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice), what);
        if (!st) return st;
    }
    return m;
}

template <typename T>
status download(const device_memory& m, std::span<T> host, const char* what) {
    if (host.empty()) return status::ok();
    return cuda_status(cudaMemcpy(host.data(), m.get(), host.size_bytes(), cudaMemcpyDeviceToHost), what);
}

inline status finish(const char* what) {
    TANDEM_CUDA_TRY(cudaGetLastError(), what);
    return cuda_status(cudaDeviceSynchronize(), what);
}

inline status check_size(size_t got, int64_t want, const char* what) {
    if (static_cast<int64_t>(got) == want) return status::ok();
    return make_error(error_code::invalid_argument, std::string(what) + ": buffer has " + std::to_string(got) +
                                                        " elements, the shape needs " + std::to_string(want));
}

// A device copy of a host weight view; the returned view points into `data` / `scales`.
struct device_weight {
    device_memory data, scales;
    k::weight_view view;
};
inline result<device_weight> upload_weight(const k::weight_view& w) {
    const weight_extent b = stored_extent(w);
    device_weight d;
    result<device_memory> data = upload(std::span<const uint8_t>(w.data, static_cast<size_t>(b.data)), "uploading a weight");
    if (!data) return data.error();
    d.data = std::move(data.value());
    if (b.scales > 0) {
        result<device_memory> sc =
            upload(std::span<const uint8_t>(w.scales, static_cast<size_t>(b.scales)), "uploading weight scales");
        if (!sc) return sc.error();
        d.scales = std::move(sc.value());
    }
    d.view = w;
    d.view.data = d.data.get<const uint8_t>();
    d.view.scales = d.scales.get<const uint8_t>();
    return result<device_weight>(std::move(d));
}

// Threads per block of the one-thread-per-output kernels (any count gives the same bytes).
constexpr int k_threads = 128;

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace plumbing

using namespace plumbing;

}  // namespace tandem::cuda

#define TANDEM_TRY_ASSIGN(var, expr)           \
    auto var = (expr);                         \
    if (!var) return var.error();
