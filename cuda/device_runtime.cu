// cuda/device_runtime.cu — device_runtime (host/device_runtime.h) on GPU 0: the phase-1 kernels over pointers
// into device memory, for the device forward. Same rule as kernels_*.cu (kernel_plumbing.cuh): every output element is
// computed by ONE thread with the CPU reference's operation order (host/kernel_math.h), so a row's
// bytes never depend on the batch or the grid. Everything runs on the legacy default stream, so
// a cudaMemcpy after a launch sees its results and scratch reuse between ops is ordered.
// Launch errors are collected per call; execution errors surface at synchronize().
#include <cuda_runtime.h>

#include <string>

#include "cuda/device_resources.h"
#include "cuda/host/device_runtime.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

namespace {

constexpr int k_threads = 128;
constexpr int k_max_hc = 8;
constexpr int k_max_route = 16;

unsigned blocks_for(int64_t n, int threads = k_threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__global__ void d_embed_expand(k::weight_view embed, const int32_t* ids, int64_t hc, float* h) {
    const int64_t t = blockIdx.x, d = embed.cols;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
        const float v = embed.at(ids[t], e);
        for (int64_t j = 0; j < hc; ++j) h[(t * hc + j) * d + e] = v;
    }
}

__global__ void d_linear(const float* x, int64_t ldx, k::weight_view w, float* y, int64_t ldy) {
    const int64_t r = blockIdx.y, o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (o < w.rows) y[r * ldy + o] = k::linear_output(x + r * ldx, w, o);
}

__global__ void d_act_quant(float* x, int64_t rows, int64_t n) {
    const int64_t blocks = (n + 127) / 128, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * blocks) return;
    const int64_t r = i / blocks, b0 = (i % blocks) * 128;
    k::qdq_e4m3_block(x + r * n + b0, n - b0 < 128 ? n - b0 : 128, 1e-4f);
}

__global__ void d_rms_norm(const float* x, int64_t n, const float* weight, float eps, float* y) {
    __shared__ float inv;
    const int64_t r = blockIdx.x;
    if (threadIdx.x == 0) inv = k::rms_inverse(x + r * n, n, eps);
    __syncthreads();
    const float v = inv;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[r * n + i] = k::rms_apply(x[r * n + i], weight, i, v);
}

__global__ void d_rope(float* x, int64_t heads, int64_t dim, const float* inv_freq, int64_t half, const int64_t* pos,
                       bool inverse) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= heads * half) return;
    const int64_t h = i / half, p = i % half;
    k::rope_pair(x + (r * heads + h) * dim + dim - 2 * half, p, inv_freq[p], pos[r], inverse);
}

__global__ void d_official_sim(official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    if (kind == official_sim::kv_fp8) k::kv_fp8_sim(x + r * dim, nope, dim);
    else k::indexer_fp4_sim(x + r * dim, dim);
}

__global__ void d_hc_pre(hc_shape s, const float* h, const float* fn, const float* base, const float* scale,
                         float* collapsed, float* post, float* comb) {
    __shared__ float mix[(2 + k_max_hc) * k_max_hc], pre[k_max_hc], inv;
    const int64_t t = blockIdx.x, n = s.n, d = s.d, nd = n * d, n_mix = (2 + n) * n;
    const float* ht = h + t * nd;
    if (threadIdx.x == 0) inv = k::rms_inverse(ht, nd, s.norm_eps);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n_mix; j += blockDim.x) {
        const float* f = fn + j * nd;
        const float r = inv;
        mix[j] = k::fixed_dot_fn([f](int64_t i) { return f[i]; }, [ht, r](int64_t i) { return ht[i] * r; }, nd);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        k::hc_pre_weights(n, s.hc_eps, s.sinkhorn_iters, mix, base, scale, pre, post + t * n, comb + t * n * n);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) collapsed[t * d + e] = k::hc_collapse(n, d, pre, ht, e);
}

__global__ void d_hc_post(int64_t n, int64_t d, const float* out, const float* h, const float* post, const float* comb,
                          float* h_new) {
    const int64_t t = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= d) return;
    for (int64_t kk = 0; kk < n; ++kk)
        h_new[(t * n + kk) * d + e] = k::hc_post_element(n, d, out + t * d, h + t * n * d, post + t * n, comb + t * n * n, kk, e);
}

// One block per row: the head weights in thread 0 (n fixed_dots over n·d), collapse in parallel.
__global__ void d_hc_head(hc_shape s, const float* h, const float* fn, const float* base, const float* scale, float* x) {
    __shared__ float pre[k_max_hc];
    const int64_t t = blockIdx.x, d = s.d;
    const float* ht = h + t * s.n * d;
    if (threadIdx.x == 0) k::hc_head_weights(s.n, d, s.norm_eps, s.hc_eps, ht, fn, base, scale, pre);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) x[t * d + e] = k::hc_collapse(s.n, d, pre, ht, e);
}

// One block per (row, head); logits in dynamic shared memory (max_keys floats).
__global__ void d_attention(const float* q, int64_t heads, int64_t dim, const float* key_rows, const int32_t* key_index,
                            int64_t max_keys, const int32_t* n_keys, const float* sinks, float scale, float* out) {
    extern __shared__ float logits[];
    __shared__ float denom;
    const int64_t t = blockIdx.x, h = blockIdx.y, nk = n_keys[t];
    const float* qh = q + (t * heads + h) * dim;
    const int32_t* idx = key_index + t * max_keys;
    auto key = [key_rows, idx, dim](int64_t j) { return key_rows + static_cast<int64_t>(idx[j]) * dim; };
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) logits[j] = k::fixed_dot(qh, key(j), dim) * scale;
    __syncthreads();
    if (threadIdx.x == 0) denom = k::attention_softmax(logits, nk, sinks[h]);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < dim; e += blockDim.x)
        out[(t * heads + h) * dim + e] = k::attention_output_element(logits, denom, nk, key, e);
}

__global__ void d_indexer_scores(const float* q, int64_t heads, int64_t dim, const float* w, const float* key_rows,
                                 const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, float idx_scale,
                                 float head_scale, float* scores) {
    const int64_t t = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= max_keys) return;
    scores[t * max_keys + j] =
        j < n_keys[t] ? k::indexer_score(q + t * heads * dim, key_rows + static_cast<int64_t>(key_index[t * max_keys + j]) * dim,
                                         heads, dim, w + t * heads, idx_scale, head_scale)
                      : 0.0f;
}

__global__ void d_route(const float* logits, int64_t tokens, int32_t experts, const float* bias, const int32_t* tid2eid,
                        const int32_t* token_ids, int32_t kk, bool official, float scale, float* scores, float* biased,
                        int32_t* expert_out, float* weight_out) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= tokens) return;
    float* s = scores + t * experts;
    float* b = biased + t * experts;
    for (int32_t e = 0; e < experts; ++e) {
        s[e] = k::sqrt_softplus(logits[t * experts + e]);
        b[e] = !tid2eid && bias ? s[e] + bias[e] : s[e];
    }
    int32_t sel[k_max_route];
    if (tid2eid) {
        for (int32_t i = 0; i < kk; ++i) sel[i] = tid2eid[static_cast<int64_t>(token_ids[t]) * kk + i];
    } else {
        k::route_top_k(b, experts, kk, sel);
    }
    k::route_weights(s, sel, kk, official, scale, expert_out + t * kk, weight_out + t * kk);
}

__global__ void d_swiglu(const float* g, const float* u, int64_t n, float limit, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = k::swiglu(g[i], u[i], limit);
}

__global__ void d_scale_rows(float* x, int64_t n, const float* w) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[r * n + i] *= w[r];
}

__global__ void d_move_rows(const float* src, int64_t width, const int32_t* index, bool gather, float* dst) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= width) return;
    if (gather) dst[r * width + i] = src[static_cast<int64_t>(index[r]) * width + i];
    else dst[static_cast<int64_t>(index[r]) * width + i] = src[r * width + i];
}

__global__ void d_add(const float* a, const float* b, int64_t n, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

__global__ void d_moe_combine(const float* contrib, int32_t slots, int64_t d, const float* shared, float* out) {
    const int64_t t = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const float* c = contrib + t * slots * d + j;
    out[t * d + j] = k::moe_combine_element([c, d](int32_t sl) { return c[sl * d]; }, slots, shared[t * d + j]);
}

__global__ void d_encode_rows(k::row_codec f, const float* values, int64_t n, uint8_t* const* dst) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n) k::encode_row(f, values + r * f.dims, dst[r]);
}

__global__ void d_decode_rows(k::row_codec f, const uint8_t* const* src, int64_t n, float* values) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n) k::decode_row(f, src[r], values + r * f.dims);
}

__global__ void d_compressor_pool(const float* ring, int64_t m, int64_t dim, bool overlap, float* out) {
    const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e < dim) out[e] = k::compressor_pool_feature(ring, m, dim, overlap, e);
}

status launched(const char* what) { return cuda_launch_status(what); }

class cuda_runtime final : public device_runtime {
public:
    explicit cuda_runtime(std::string gpu) : gpu_(std::move(gpu)) {}
    const char* name() const override { return "cuda"; }
    std::string describe() const override { return gpu_; }

    result<void*> alloc(int64_t bytes, const char* what) override {
        void* p = nullptr;
        TANDEM_CUDA_TRY(cudaMalloc(&p, static_cast<size_t>(bytes)), what);
        status st = cuda_status(cudaMemset(p, 0, static_cast<size_t>(bytes)), what);
        if (!st) {
            cudaFree(p);
            return st;
        }
        return p;
    }
    void free(void* p) override { cudaFree(p); }
    status upload(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "upload")
                         : status::ok();
    }
    status download(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "download")
                         : status::ok();
    }
    status copy(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, 0),
                                       "device copy")
                         : status::ok();
    }
    status synchronize() override { return cuda_status(cudaDeviceSynchronize(), "running the step's kernels"); }

    status embed_expand(const k::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc, float* h) override {
        if (rows > 0) d_embed_expand<<<static_cast<unsigned>(rows), k_threads>>>(embed, ids, hc, h);
        return launched("K1 embed");
    }
    status linear(const float* x, int64_t ldx, int64_t rows, const k::weight_view& w, float* y, int64_t ldy) override {
        if (rows > 0 && w.rows > 0) d_linear<<<dim3(blocks_for(w.rows), static_cast<unsigned>(rows)), k_threads>>>(x, ldx, w, y, ldy);
        return launched("linear");
    }
    status act_quant_fp8(float* x, int64_t rows, int64_t n) override {
        const int64_t blocks = rows * ((n + 127) / 128);
        if (blocks > 0) d_act_quant<<<blocks_for(blocks), k_threads>>>(x, rows, n);
        return launched("activation FP8 QDQ");
    }
    status rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) override {
        if (rows > 0) d_rms_norm<<<static_cast<unsigned>(rows), k_threads>>>(x, n, weight, eps, y);
        return launched("K3 rms_norm");
    }
    status rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half, const int64_t* pos,
                bool inverse) override {
        if (rows > 0 && half > 0)
            d_rope<<<dim3(blocks_for(heads * half), static_cast<unsigned>(rows)), k_threads>>>(x, heads, dim, inv_freq, half, pos, inverse);
        return launched("RoPE");
    }
    status official_sim(cuda::official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) override {
        if (rows > 0) d_official_sim<<<blocks_for(rows, 64), 64>>>(kind, x, rows, dim, nope);
        return launched("official simulation");
    }
    status hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                  float* collapsed, float* post, float* comb) override {
        if (s.n < 1 || s.n > k_max_hc) return make_error(error_code::invalid_argument, "K2 hc_pre: hc_mult outside [1, 8]");
        if (rows > 0) d_hc_pre<<<static_cast<unsigned>(rows), k_threads>>>(s, h, fn, base, scale, collapsed, post, comb);
        return launched("K2 hc_pre");
    }
    status hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post, const float* comb,
                   float* h_new) override {
        if (rows > 0) d_hc_post<<<dim3(blocks_for(d), static_cast<unsigned>(rows)), k_threads>>>(n, d, out, h, post, comb, h_new);
        return launched("K17 hc_post");
    }
    status hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                   float* x) override {
        if (s.n < 1 || s.n > k_max_hc) return make_error(error_code::invalid_argument, "K18 hc_head: hc_mult outside [1, 8]");
        if (rows > 0) d_hc_head<<<static_cast<unsigned>(rows), k_threads>>>(s, h, fn, base, scale, x);
        return launched("K18 hc_head");
    }
    status attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows, const int32_t* key_index,
                     int64_t max_keys, const int32_t* n_keys, const float* sinks, float scale, float* out) override {
        const int64_t shared = max_keys * 4;
        if (shared > 48 * 1024)
            return make_error(error_code::out_of_range,
                              "K13 attention: " + std::to_string(max_keys) + " keys per row exceed the phase-1 kernel's 12288");
        if (rows > 0)
            d_attention<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), k_threads, static_cast<size_t>(shared)>>>(
                q, heads, dim, key_rows, key_index, max_keys, n_keys, sinks, scale, out);
        return launched("K13 attention");
    }
    status indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w, const float* key_rows,
                          const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, float idx_scale,
                          float head_scale, float* scores) override {
        if (rows > 0 && max_keys > 0)
            d_indexer_scores<<<dim3(blocks_for(max_keys), static_cast<unsigned>(rows)), k_threads>>>(
                q, heads, dim, w, key_rows, key_index, max_keys, n_keys, idx_scale, head_scale, scores);
        return launched("K11 indexer scores");
    }
    status route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                 const int32_t* token_ids, int32_t kk, bool official, float scale, int32_t* expert_out,
                 float* weight_out) override {
        if (kk < 1 || kk > k_max_route || kk > experts)
            return make_error(error_code::invalid_argument, "K15 route: k outside [1, min(16, experts)]");
        const int64_t need = 2 * rows * experts * 4;
        if (route_scratch_.bytes() < need) {
            route_scratch_.reset();
            result<device_memory> m = device_memory::alloc(need, "K15 route scratch");
            if (!m) return m.error();
            route_scratch_ = std::move(m.value());
        }
        float* s = route_scratch_.get<float>();
        if (rows > 0)
            d_route<<<blocks_for(rows, 64), 64>>>(logits, rows, static_cast<int32_t>(experts), bias, tid2eid, token_ids, kk,
                                                  official, scale, s, s + rows * experts, expert_out, weight_out);
        return launched("K15 route");
    }
    status swiglu(const float* g, const float* u, int64_t n, float limit, float* out) override {
        if (n > 0) d_swiglu<<<blocks_for(n), k_threads>>>(g, u, n, limit, out);
        return launched("swiglu");
    }
    status scale_rows(float* x, int64_t rows, int64_t n, const float* w) override {
        if (rows > 0 && n > 0) d_scale_rows<<<dim3(blocks_for(n), static_cast<unsigned>(rows)), k_threads>>>(x, n, w);
        return launched("scale rows");
    }
    status gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        if (rows > 0) d_move_rows<<<dim3(blocks_for(width), static_cast<unsigned>(rows)), k_threads>>>(src, width, index, true, dst);
        return launched("gather rows");
    }
    status scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        if (rows > 0) d_move_rows<<<dim3(blocks_for(width), static_cast<unsigned>(rows)), k_threads>>>(src, width, index, false, dst);
        return launched("scatter rows");
    }
    status add(const float* a, const float* b, int64_t n, float* out) override {
        if (n > 0) d_add<<<blocks_for(n), k_threads>>>(a, b, n, out);
        return launched("add");
    }
    status moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out) override {
        if (rows > 0) d_moe_combine<<<dim3(blocks_for(d), static_cast<unsigned>(rows)), k_threads>>>(contrib, slots, d, shared, out);
        return launched("K16 combine");
    }
    status encode_rows(const k::row_codec& f, const float* values, int64_t n, uint8_t* const* dst) override {
        if (n > 0) d_encode_rows<<<blocks_for(n, 64), 64>>>(f, values, n, dst);
        return launched("row store");
    }
    status decode_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, float* values) override {
        if (n > 0) d_decode_rows<<<blocks_for(n, 64), 64>>>(f, src, n, values);
        return launched("row read");
    }
    status compressor_pool(const float* ring, int64_t m, int64_t dim, bool overlap, float* out) override {
        if (dim > 0) d_compressor_pool<<<blocks_for(dim), k_threads>>>(ring, m, dim, overlap, out);
        return launched("K9 compressor pool");
    }

private:
    std::string gpu_;
    device_memory route_scratch_;
};

}  // namespace

bool cuda_forward_built() { return true; }

result<std::unique_ptr<device_runtime>> make_cuda_runtime() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return make_error(error_code::unavailable, "no usable GPU (cudaGetDeviceCount found none)");
    }
    TANDEM_CUDA_TRY(cudaSetDevice(0), "selecting GPU 0");
    cudaDeviceProp prop{};
    TANDEM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading GPU 0's properties");
    size_t free_b = 0, total_b = 0;
    TANDEM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "reading GPU 0's free memory");
    const std::string gpu = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                            std::to_string(free_b >> 20) + " MiB free)";
    return std::unique_ptr<device_runtime>(new cuda_runtime(gpu));
}

}  // namespace tandem::cuda
