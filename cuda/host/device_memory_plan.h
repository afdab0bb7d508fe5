// cuda/host/device_memory_plan.h — Where every byte goes on the GPU, decided on the host.
//
// Two slabs, both addressed with int64 offsets (design invariant 9):
//   weights  every checkpoint tensor in its STORED form (BF16, FP8 e4m3 + UE8M0 scales, FP4
//            packed, fp32 norms) — never expanded to fp32; each tensor starts at a multiple of
//            k_tensor_alignment so kernels can use vector loads.
//   pool     the cache arena exactly as cache::pool_geometry lays it out (one slab, the same
//            offsets the CPU pool uses, so transfer descriptors and checksums carry over), then
//            the page epochs mirrored as uint32 per page (kernels that write pages compare them).
// plus a fixed reserve for per-step scratch. Plain C++: CI tests it; cuda/ allocates from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "core/status.h"
#include "model/safetensors.h"

namespace tandem::cuda {

struct device_tensor {
    std::string name;
    const model::tensor_view* source = nullptr;  // bytes in the mapped checkpoint
    int64_t offset = 0;                          // inside the weight slab
    int64_t bytes = 0;                           // stored bytes (== source->nbytes)
};

struct device_memory_plan {
    static constexpr int64_t k_tensor_alignment = 256;

    std::vector<device_tensor> tensors;  // in checkpoint name order
    int64_t weight_bytes = 0;            // the weight slab (tensors + alignment)
    int64_t stored_weight_bytes = 0;     // Σ stored bytes (what the checkpoint holds)

    int64_t arena_bytes = 0;       // cache::pool_geometry::total_bytes()
    int64_t epoch_offset = 0;      // uint32[num_pages] after the arena, aligned
    int64_t num_pages = 0;
    int64_t pool_bytes = 0;        // the pool slab: arena + epochs

    int64_t scratch_bytes = 0;     // per-step activations (reserved, sized by the caller)

    // Engines of this process on the device (pd role both: 2): each has its own pool and scratch,
    // the weights are uploaded once and shared (cuda::resident_weights).
    int engines = 1;

    int64_t total_bytes() const { return weight_bytes + engines * (pool_bytes + scratch_bytes); }
    const device_tensor* find(const std::string& name) const;
};

// `geometry` and `scratch_bytes` are each engine's; `engines` as device_memory_plan::engines.
result<device_memory_plan> plan_device_memory(const model::checkpoint& ck, const cache::pool_geometry& geometry,
                                              int64_t scratch_bytes, int engines = 1);

// The weight slab's bytes for `ck` (every tensor as stored, each aligned): what plan_device_memory
// gives as weight_bytes, without a pool.
result<int64_t> device_weight_bytes(const model::checkpoint& ck);

// cache.memory_bytes = 0 on a GPU: each engine's pool budget, `fraction` (cache.memory_fraction) of
// what `free_bytes` leaves after the weights (once) and every engine's scratch, split between the
// `engines`. The host rule (a fraction of MemAvailable) does not apply: the pool lives on the GPU.
// Errors when nothing is left, with the numbers.
result<int64_t> device_pool_budget(int64_t free_bytes, int64_t weight_bytes, int64_t scratch_bytes, int engines,
                                   double fraction);

// ok when the plan fits in `free_bytes` of `gpu`; otherwise a refusal that names the GPU, the
// bytes each part needs and what is free, and what to change (cache.memory_bytes).
status check_device_fit(const device_memory_plan& plan, int64_t free_bytes, const std::string& gpu);

// "weights 12.3 MiB (1523 tensors as stored), pool 64.0 MiB (256 pages), scratch 8.0 MiB".
std::string describe_device_memory(const device_memory_plan& plan);

}  // namespace tandem::cuda
