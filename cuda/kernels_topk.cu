// cuda/kernels_topk.cu — K12, the indexer's top-k, and its epilogue: their launchers
// (kernel_launch.h) and the host-buffer entry point (host/cuda_ops.h). Why K12 is an exact
// threshold select with a "tied" flag per row, and why that keeps the GPU's selection equal to the
// CPU's: host/kernel_math.h (top_k_row, the serial form of this kernel, which the host emulation
// runs). Rules shared by every kernels_*.cu: kernel_plumbing.cuh.
#include "cuda/kernel_launch.h"
#include "cuda/kernel_plumbing.cuh"

namespace tandem::cuda {

namespace {

constexpr int k_topk_threads = 256;  // also the radix (8-bit digits) and the compaction chunk

// Exclusive prefix sum of x over the block (Hillis–Steele in shared memory); total = the sum.
// Every thread of the block must call it.
__device__ int block_exclusive_scan(int x, int* buf, int& total) {
    const int tid = static_cast<int>(threadIdx.x), bs = static_cast<int>(blockDim.x);
    buf[tid] = x;
    __syncthreads();
    for (int off = 1; off < bs; off <<= 1) {
        const int y = tid >= off ? buf[tid - off] : 0;
        __syncthreads();
        buf[tid] += y;
        __syncthreads();
    }
    total = buf[bs - 1];
    const int inclusive = buf[tid];
    __syncthreads();
    return inclusive - x;
}

// One CTA per row. Four radix passes (8-bit digits of kmath::top_k_key, most significant first)
// find the k-th largest key: per pass a shared histogram of the candidates' digits (integer
// counts: the same whatever order the atomics land in), then thread 0 picks the digit
// (kmath::top_k_pick_digit). Then one compaction pass in index order writes the ids above the
// threshold plus the lowest-index equal ones that fit — kmath::top_k_row's output — and the
// row's tied flag. Everything the output depends on is an integer count, so it is the same bytes
// for any grid, batch or run.
__global__ void top_k_kernel(const float* scores, int64_t ld, const int32_t* n_cand, int64_t k, int32_t* sel,
                             int32_t* tied) {
    __shared__ uint32_t hist[256];
    __shared__ int scan[k_topk_threads];
    __shared__ uint32_t prefix_s, equal_s;
    __shared__ long long need_s;
    __shared__ int nan_s;
    const int64_t r = blockIdx.x, n = n_cand[r];
    const float* v = scores + r * ld;
    int32_t* out = sel + r * k;
    const int tid = static_cast<int>(threadIdx.x), bs = static_cast<int>(blockDim.x);
    if (n <= k) {
        for (int64_t j = tid; j < k; j += bs) out[j] = j < n ? static_cast<int32_t>(j) : -1;
        if (tid == 0) tied[r] = 0;
        return;
    }
    if (tid == 0) prefix_s = 0, need_s = k, nan_s = 0;
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = tid; d < 256; d += bs) hist[d] = 0;
        __syncthreads();
        const uint32_t prefix = prefix_s;
        for (int64_t j = tid; j < n; j += bs) {
            const float x = v[j];
            if (x != x) nan_s = 1;
            const uint32_t key = k::top_k_key(x);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int64_t need = need_s;
            const uint32_t d = k::top_k_pick_digit(hist, need);
            need_s = need;
            prefix_s = prefix | (d << shift);
            equal_s = hist[d];
        }
        __syncthreads();
        mask |= 255u << shift;
    }
    const uint32_t threshold = prefix_s;
    const int64_t need = need_s;
    if (tid == 0) tied[r] = (nan_s || static_cast<int64_t>(equal_s) > need) ? 1 : 0;
    int64_t taken = 0, equal_seen = 0;  // the same in every thread (block totals)
    for (int64_t base = 0; base < n; base += bs) {
        const int64_t j = base + tid;
        const uint32_t key = j < n ? k::top_k_key(v[j]) : 0u;
        const bool above = j < n && key > threshold, equal = j < n && key == threshold;
        int equal_total = 0, take_total = 0;
        const int equal_before = block_exclusive_scan(equal ? 1 : 0, scan, equal_total);
        const bool take = above || (equal && equal_seen + equal_before < need);
        const int take_before = block_exclusive_scan(take ? 1 : 0, scan, take_total);
        if (take) out[taken + take_before] = static_cast<int32_t>(j);
        taken += take_total;
        equal_seen += equal_total;
    }
}

// One thread per (row, slot): the row's selected compressed rows into its attention key list.
__global__ void place_selected_kernel(const int32_t* sel, int64_t k, const int32_t* at, const int32_t* base,
                                      int32_t* key_index, int64_t ld, int32_t* keep) {
    const int64_t r = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= k || at[r] < 0) return;
    const int32_t id = sel[r * k + j];
    if (id < 0) return;
    key_index[r * ld + at[r] + j] = base[r] + id;
    keep[base[r] + id] = 1;  // several rows may mark one key: they all store 1
}

}  // namespace

// ---- launchers (kernel_launch.h) ------------------------------------------------------------------

status launch_top_k(const float* scores, int64_t rows, int64_t ld, const int32_t* n_cand, int64_t k, int32_t* sel,
                    int32_t* tied, cudaStream_t stream) {
    if (k < 1) return make_error(error_code::invalid_argument, "K12 top-k: k must be at least 1");
    if (rows > 0) top_k_kernel<<<static_cast<unsigned>(rows), k_topk_threads, 0, stream>>>(scores, ld, n_cand, k, sel, tied);
    return cuda_launch_status("K12 top-k");
}

status launch_place_selected(const int32_t* sel, int64_t rows, int64_t k, const int32_t* at, const int32_t* base,
                             int32_t* key_index, int64_t ld, int32_t* keep, cudaStream_t stream) {
    if (rows > 0 && k > 0)
        place_selected_kernel<<<dim3(blocks_for(k, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            sel, k, at, base, key_index, ld, keep);
    return cuda_launch_status("K12 place selected");
}

// ---- host-buffer entry point (host/cuda_ops.h) ----------------------------------------------------

status op_top_k(std::span<const float> scores, int64_t rows, int64_t ld, std::span<const int32_t> n_cand, int64_t k,
                std::span<int32_t> sel, std::span<int32_t> tied) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (k < 1) return make_error(error_code::invalid_argument, "K12 top-k: k must be at least 1");
    TANDEM_RETURN_IF_ERROR(check_size(scores.size(), rows * ld, "K12 top-k: scores"));
    TANDEM_RETURN_IF_ERROR(check_size(n_cand.size(), rows, "K12 top-k: candidate counts"));
    TANDEM_RETURN_IF_ERROR(check_size(sel.size(), rows * k, "K12 top-k: selection"));
    TANDEM_RETURN_IF_ERROR(check_size(tied.size(), rows, "K12 top-k: tied flags"));
    for (int32_t n : n_cand)
        if (n < 0 || n > ld) return make_error(error_code::out_of_range, "K12 top-k: candidate count outside [0, ld]");
    TANDEM_TRY_ASSIGN(ds, upload(scores, "K12: scores"));
    TANDEM_TRY_ASSIGN(dn, upload(n_cand, "K12: candidate counts"));
    TANDEM_TRY_ASSIGN(dsel, device_memory::alloc(static_cast<int64_t>(sel.size_bytes()), "K12: selection"));
    TANDEM_TRY_ASSIGN(dt, device_memory::alloc(static_cast<int64_t>(tied.size_bytes()), "K12: tied flags"));
    TANDEM_RETURN_IF_ERROR(launch_top_k(ds->get<float>(), rows, ld, dn->get<int32_t>(), k, dsel->get<int32_t>(),
                                        dt->get<int32_t>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K12 top-k kernel"));
    TANDEM_RETURN_IF_ERROR(download(*dsel, sel, "K12: selection"));
    return download(*dt, tied, "K12: tied flags");
}

}  // namespace tandem::cuda
