// cuda/device_resources.h — (cuda/ internal) RAII owners of device memory, streams and events.
// Creation returns result<> (never throws); destruction never fails loudly (a destructor has no
// one to report to, and the driver reclaims everything at exit anyway).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/cuda_check.h"

namespace tandem::cuda {

class device_memory {
public:
    device_memory() = default;
    ~device_memory() { reset(); }
    device_memory(device_memory&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
    device_memory& operator=(device_memory&& o) noexcept {
        if (this != &o) {
            reset();
            ptr_ = std::exchange(o.ptr_, nullptr);
            bytes_ = o.bytes_;
        }
        return *this;
    }
    device_memory(const device_memory&) = delete;
    device_memory& operator=(const device_memory&) = delete;

    static result<device_memory> alloc(int64_t bytes, const char* what) {
        device_memory m;
        if (bytes <= 0) return result<device_memory>(std::move(m));
        status st = cuda_status(cudaMalloc(&m.ptr_, static_cast<size_t>(bytes)), what);
        if (!st) return st;
        m.bytes_ = bytes;
        return result<device_memory>(std::move(m));
    }
    template <typename T = void>
    T* get() const { return static_cast<T*>(ptr_); }
    int64_t bytes() const { return bytes_; }
    void reset() {
        if (ptr_) cudaFree(ptr_);
        ptr_ = nullptr;
        bytes_ = 0;
    }

private:
    void* ptr_ = nullptr;
    int64_t bytes_ = 0;
};

class cuda_stream {
public:
    cuda_stream() = default;
    ~cuda_stream() { if (s_) cudaStreamDestroy(s_); }
    cuda_stream(cuda_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    cuda_stream& operator=(cuda_stream&& o) noexcept { std::swap(s_, o.s_); return *this; }
    cuda_stream(const cuda_stream&) = delete;
    cuda_stream& operator=(const cuda_stream&) = delete;
    static result<cuda_stream> create() {
        cuda_stream s;
        status st = cuda_status(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking), "creating a CUDA stream");
        if (!st) return st;
        return result<cuda_stream>(std::move(s));
    }
    cudaStream_t get() const { return s_; }
    status sync(const char* what) const { return cuda_status(cudaStreamSynchronize(s_), what); }

private:
    cudaStream_t s_ = nullptr;
};

class cuda_event {
public:
    cuda_event() = default;
    ~cuda_event() { if (e_) cudaEventDestroy(e_); }
    cuda_event(cuda_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    cuda_event& operator=(cuda_event&& o) noexcept { std::swap(e_, o.e_); return *this; }
    cuda_event(const cuda_event&) = delete;
    cuda_event& operator=(const cuda_event&) = delete;
    static result<cuda_event> create() {
        cuda_event e;
        status st = cuda_status(cudaEventCreate(&e.e_), "creating a CUDA event");
        if (!st) return st;
        return result<cuda_event>(std::move(e));
    }
    cudaEvent_t get() const { return e_; }
    status record(const cuda_stream& s) const { return cuda_status(cudaEventRecord(e_, s.get()), "recording an event"); }

private:
    cudaEvent_t e_ = nullptr;
};

// GPU 0, selected as the current device, and what the startup log says of it.
struct gpu0_info {
    std::string label;  // "NVIDIA H200 (sm_90"
    int64_t free_bytes = 0, total_bytes = 0;
};
inline result<gpu0_info> select_gpu0(const char* none_message) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error
        return make_error(error_code::unavailable, none_message);
    }
    TANDEM_CUDA_TRY(cudaSetDevice(0), "selecting GPU 0");
    cudaDeviceProp prop{};
    TANDEM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading GPU 0's properties");
    size_t free_b = 0, total_b = 0;
    TANDEM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "reading GPU 0's free memory");
    return gpu0_info{std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor),
                     static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

// Milliseconds between two recorded events (after both completed).
inline result<float> elapsed_ms(const cuda_event& a, const cuda_event& b) {
    TANDEM_CUDA_TRY(cudaEventSynchronize(b.get()), "waiting for an event");
    float ms = 0;
    TANDEM_CUDA_TRY(cudaEventElapsedTime(&ms, a.get(), b.get()), "reading event time");
    return ms;
}

}  // namespace tandem::cuda
