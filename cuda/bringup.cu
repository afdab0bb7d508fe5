// cuda/bringup.cu — Phase 0 on a real GPU (host/cuda_ops.h bring_up_device): the weight slab
// filled with the checkpoint's stored bytes, the pool slab (arena + mirrored epochs) zeroed,
// and a read-back checksum proving the upload. Refuses before allocating when the plan does not
// fit, with the numbers (host/device_memory_plan.h check_device_fit).
#include <cuda_runtime.h>
#include <xxhash.h>

#include <chrono>
#include <memory>
#include <vector>

#include "cuda/device_resources.h"
#include "cuda/host/cuda_ops.h"

namespace tandem::cuda {

namespace {

// Hashes each tensor's bytes in plan order into one XXH3 stream (device bytes are read back in
// bounded pieces so a large model never needs a second host copy).
uint64_t hash_host_tensors(const device_memory_plan& plan) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (const device_tensor& t : plan.tensors) XXH3_64bits_update(st, t.source->data, static_cast<size_t>(t.bytes));
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

result<uint64_t> hash_device_tensors(const device_memory_plan& plan, const device_memory& slab) {
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(st.get());
    std::vector<uint8_t> buf;
    const int64_t piece = int64_t{64} << 20;
    for (const device_tensor& t : plan.tensors) {
        for (int64_t off = 0; off < t.bytes; off += piece) {
            const int64_t n = std::min(piece, t.bytes - off);
            buf.resize(static_cast<size_t>(n));
            TANDEM_CUDA_TRY(cudaMemcpy(buf.data(), slab.get<uint8_t>() + t.offset + off, static_cast<size_t>(n),
                                       cudaMemcpyDeviceToHost),
                            "reading weights back from the GPU");
            XXH3_64bits_update(st.get(), buf.data(), static_cast<size_t>(n));
        }
    }
    return static_cast<uint64_t>(XXH3_64bits_digest(st.get()));
}

}  // namespace

result<int64_t> gpu0_free_bytes() {
    result<gpu0_info> gpu = select_gpu0("no usable GPU for the CUDA backend");
    if (!gpu) return gpu.error();
    return gpu->free_bytes;
}

result<bringup_report> bring_up_device(const device_memory_plan& plan) {
    result<gpu0_info> gpu = select_gpu0("no usable GPU for the CUDA backend");
    if (!gpu) return gpu.error();
    bringup_report r;
    r.gpu = gpu->label + ", " + std::to_string(gpu->total_bytes >> 20) + " MiB)";
    r.free_bytes_before = gpu->free_bytes;
    TANDEM_RETURN_IF_ERROR(check_device_fit(plan, r.free_bytes_before, r.gpu));
    r.weight_bytes = plan.weight_bytes;
    r.pool_bytes = plan.pool_bytes;
    r.scratch_bytes = plan.scratch_bytes;

    const auto t0 = std::chrono::steady_clock::now();
    result<device_memory> weights = device_memory::alloc(plan.weight_bytes, "allocating the weight slab");
    if (!weights) return weights.error();
    for (const device_tensor& t : plan.tensors)
        TANDEM_CUDA_TRY(cudaMemcpy(weights->get<uint8_t>() + t.offset, t.source->data, static_cast<size_t>(t.bytes),
                                   cudaMemcpyHostToDevice),
                        ("uploading tensor " + t.name).c_str());
    r.upload_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result<device_memory> pool = device_memory::alloc(plan.pool_bytes, "allocating the cache pool slab");
    if (!pool) return pool.error();
    // Zero pages and epochs: the mirror starts equal to a fresh host pool (every epoch 0).
    TANDEM_CUDA_TRY(cudaMemset(pool->get(), 0, static_cast<size_t>(plan.pool_bytes)), "zeroing the cache pool slab");
    result<device_memory> scratch = device_memory::alloc(plan.scratch_bytes, "allocating step scratch");
    if (!scratch) return scratch.error();

    r.weights_xxh3 = hash_host_tensors(plan);
    result<uint64_t> back = hash_device_tensors(plan, *weights);
    if (!back) return back.error();
    r.readback_equal = *back == r.weights_xxh3;
    return r;
}

}  // namespace tandem::cuda
