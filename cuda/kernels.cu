// cuda/kernels.cu — The phase-1 kernels (spec §5.4) and their host-buffer entry points
// (host/cuda_ops.h). Correct first: every output element is computed by ONE thread with the
// reduction order of the CPU reference (host/kernel_math.h), so a row's bytes never depend on
// the batch, its position in it, the grid or the SM count (spec §3.5). Parallelism is only over
// independent outputs. Phase 2 replaces the inner loops with mma.sync / wgmma tiles that keep
// the same per-output K order. Built with --fmad=false (cuda/meson.build): no silent contraction.
#include <cuda_runtime.h>

#include <vector>

#include "cuda/device_resources.h"
#include "cuda/host/cuda_ops.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

// ---- kernels -------------------------------------------------------------------------------

namespace {

__global__ void embed_expand_kernel(k::weight_view embed, const int32_t* ids, int64_t hc, float* h) {
    const int64_t t = blockIdx.x, d = embed.cols;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
        const float v = embed.at(ids[t], e);
        for (int64_t j = 0; j < hc; ++j) h[(t * hc + j) * d + e] = v;
    }
}

// One thread per (row, output column).
__global__ void linear_kernel(const float* x, int64_t rows, k::weight_view w, float* y) {
    const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (o >= w.rows || r >= rows) return;
    y[r * w.rows + o] = k::linear_output(x + r * w.cols, w, o);
}

// One block per row; the mean of squares is one fixed_dot (thread 0), the scaling is parallel.
__global__ void rms_norm_kernel(const float* x, int64_t n, const float* weight, float eps, float* y) {
    __shared__ float inv;
    const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
    if (threadIdx.x == 0) inv = k::rms_inverse(row, n, eps);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        y[static_cast<int64_t>(blockIdx.x) * n + i] = k::rms_apply(row[i], weight, i, inv);
}

__global__ void qdq_fp8_kernel(float* x, int64_t n, int64_t block, float amax_floor) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, b0 = b * block;
    if (b0 >= n) return;
    k::qdq_e4m3_block(x + b0, (n - b0) < block ? (n - b0) : block, amax_floor);
}

__global__ void rope_kernel(float* x, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                            const int64_t* pos, bool inverse) {
    const int64_t row = blockIdx.x, h = blockIdx.y;
    float* head = x + (row * heads + h) * dim + (dim - 2 * half);
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) k::rope_pair(head, i, inv_freq[i], pos[row], inverse);
}

constexpr int k_max_hc = 8;

// One block per token: mix logits in parallel (one fixed_dot each over the RMS-normed streams),
// Sinkhorn in thread 0 (20 iterations of a 4x4 matrix: not worth a warp), collapse in parallel.
__global__ void hc_pre_kernel(hc_shape s, const float* h, const float* fn, const float* base, const float* scale,
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

__global__ void hc_post_kernel(int64_t n, int64_t d, const float* out, const float* h, const float* post,
                               const float* comb, float* h_new) {
    const int64_t t = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= d) return;
    for (int64_t kk = 0; kk < n; ++kk)
        h_new[(t * n + kk) * d + e] =
            k::hc_post_element(n, d, out + t * d, h + t * n * d, post + t * n, comb + t * n * n, kk, e);
}

// One block per (token, head); logits live in dynamic shared memory (max_keys floats).
__global__ void attention_kernel(const float* q, int64_t heads, int64_t dim, const float* keys, int64_t max_keys,
                                 const int32_t* n_keys, const float* sinks, float scale, float* out) {
    extern __shared__ float logits[];
    __shared__ float denom;
    const int64_t t = blockIdx.x, h = blockIdx.y, nk = n_keys[t];
    const float* qh = q + (t * heads + h) * dim;
    const float* kt = keys + t * max_keys * dim;
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) logits[j] = k::fixed_dot(qh, kt + j * dim, dim) * scale;
    __syncthreads();
    if (threadIdx.x == 0) denom = k::attention_softmax(logits, nk, sinks[h]);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < dim; e += blockDim.x)
        out[(t * heads + h) * dim + e] =
            k::attention_output_element(logits, denom, nk, [kt, dim](int64_t j) { return kt + j * dim; }, e);
}

constexpr int k_max_route = 16;

// One thread per token: scores, selection, weights (K15).
__global__ void route_kernel(const float* logits, int64_t tokens, int32_t experts, const float* bias,
                             const int32_t* tid2eid, const int32_t* token_ids, int32_t k, bool official, float scale,
                             float* scores, float* biased, int32_t* expert_out, float* weight_out) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= tokens) return;
    float* s = scores + t * experts;
    float* b = biased + t * experts;
    for (int32_t e = 0; e < experts; ++e) {
        s[e] = k::sqrt_softplus(logits[t * experts + e]);
        b[e] = bias ? s[e] + bias[e] : s[e];
    }
    int32_t sel[k_max_route];
    if (tid2eid) {
        for (int32_t i = 0; i < k; ++i) sel[i] = tid2eid[static_cast<int64_t>(token_ids[t]) * k + i];
    } else {
        k::route_top_k(b, experts, k, sel);
    }
    k::route_weights(s, sel, k, official, scale, expert_out + t * k, weight_out + t * k);
}

__global__ void swiglu_kernel(const float* g, const float* u, int64_t n, float limit, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = k::swiglu(g[i], u[i], limit);
}

__global__ void moe_combine_kernel(const float* contrib, int32_t slots, int64_t d, const float* shared, float* out) {
    const int64_t t = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const float* c = contrib + t * slots * d + j;
    out[t * d + j] = k::moe_combine_element([c, d](int32_t sl) { return c[sl * d]; }, slots, shared[t * d + j]);
}

__global__ void encode_rows_kernel(k::row_codec f, const float* values, int64_t n, uint8_t* rows) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n) k::encode_row(f, values + r * f.dims, rows + r * f.bytes);
}

__global__ void decode_rows_kernel(k::row_codec f, const uint8_t* rows, int64_t n, float* values) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n) k::decode_row(f, rows + r * f.bytes, values + r * f.dims);
}

// One thread per (token, compressed row).
__global__ void indexer_scores_kernel(const float* q, int64_t heads, int64_t dim, const float* w, const float* keys,
                                      int64_t max_rows, const int32_t* n_rows, float idx_scale, float head_scale,
                                      float* scores) {
    const int64_t t = blockIdx.y, row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= max_rows) return;
    scores[t * max_rows + row] =
        row < n_rows[t] ? k::indexer_score(q + t * heads * dim, keys + (t * max_rows + row) * dim, heads, dim,
                                           w + t * heads, idx_scale, head_scale)
                        : 0.0f;
}

// One thread per (window, feature).
__global__ void compressor_pool_kernel(const float* rings, int64_t m, int64_t dim, bool overlap, float* out) {
    const int64_t win = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= dim) return;
    const int64_t slots = overlap ? 2 * m : m, F = 2 * (overlap ? 2 : 1) * dim;
    out[win * dim + e] = k::compressor_pool_feature(rings + win * slots * F, m, dim, overlap, e);
}

__global__ void official_sim_kernel(official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    if (kind == official_sim::kv_fp8) k::kv_fp8_sim(x + r * dim, nope, dim);
    else k::indexer_fp4_sim(x + r * dim, dim);
}

__global__ void argmax_kernel(const float* logits, int64_t vocab, int32_t* ids) {
    if (threadIdx.x != 0) return;
    const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > row[best]) best = v;  // strict: ties keep the lowest id
    ids[blockIdx.x] = static_cast<int32_t>(best);
}

// ---- host plumbing ---------------------------------------------------------------------------

status need_gpu() {
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

status finish(const char* what) {
    TANDEM_CUDA_TRY(cudaGetLastError(), what);
    return cuda_status(cudaDeviceSynchronize(), what);
}

status check_size(size_t got, int64_t want, const char* what) {
    if (static_cast<int64_t>(got) == want) return status::ok();
    return make_error(error_code::invalid_argument, std::string(what) + ": buffer has " + std::to_string(got) +
                                                        " elements, the shape needs " + std::to_string(want));
}

// The stored bytes a weight view reaches (values of rows [0, row0 + rows), and their scales).
struct weight_bytes {
    int64_t data = 0, scales = 0;
};
weight_bytes stored_bytes(const k::weight_view& w) {
    weight_bytes b;
    b.data = (w.row0 + w.rows) * w.row_bytes();
    if (w.scale != k::sform::none)
        b.scales = ((w.row0 + w.rows + w.block_rows - 1) / w.block_rows) * w.scale_cols *
                   (w.scale == k::sform::f32 ? 4 : 1);
    return b;
}

// A device copy of a host weight view; the returned view points into `data` / `scales`.
struct device_weight {
    device_memory data, scales;
    k::weight_view view;
};
result<device_weight> upload_weight(const k::weight_view& w) {
    const weight_bytes b = stored_bytes(w);
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

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

// ---- entry points --------------------------------------------------------------------------

#define TANDEM_TRY_ASSIGN(var, expr)           \
    auto var = (expr);                         \
    if (!var) return var.error();

status op_embed_expand(const k::weight_view& embed, std::span<const int32_t> ids, int64_t hc, std::span<float> h) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t T = static_cast<int64_t>(ids.size());
    TANDEM_RETURN_IF_ERROR(check_size(h.size(), T * hc * embed.cols, "K1 embed: h"));
    for (int32_t id : ids)
        if (id < 0 || id >= embed.rows) return make_error(error_code::out_of_range, "K1 embed: token id outside the vocabulary");
    TANDEM_TRY_ASSIGN(w, upload_weight(embed));
    TANDEM_TRY_ASSIGN(d_ids, upload(ids, "K1 embed: ids"));
    TANDEM_TRY_ASSIGN(d_h, device_memory::alloc(static_cast<int64_t>(h.size_bytes()), "K1 embed: h"));
    if (T > 0) embed_expand_kernel<<<static_cast<unsigned>(T), 256>>>(w->view, d_ids->get<int32_t>(), hc, d_h->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K1 embed_expand"));
    return download(*d_h, h, "K1 embed: download");
}

status op_linear(std::span<const float> x, int64_t rows, const k::weight_view& w, std::span<float> y) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * w.cols, "linear: x"));
    TANDEM_RETURN_IF_ERROR(check_size(y.size(), rows * w.rows, "linear: y"));
    TANDEM_TRY_ASSIGN(dw, upload_weight(w));
    TANDEM_TRY_ASSIGN(dx, upload(x, "linear: x"));
    TANDEM_TRY_ASSIGN(dy, device_memory::alloc(static_cast<int64_t>(y.size_bytes()), "linear: y"));
    if (rows > 0 && w.rows > 0)
        linear_kernel<<<dim3(blocks_for(w.rows, 128), static_cast<unsigned>(rows)), 128>>>(dx->get<float>(), rows,
                                                                                          dw->view, dy->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("linear kernel"));
    return download(*dy, y, "linear: download");
}

status op_rms_norm(std::span<const float> x, int64_t rows, int64_t n, const float* weight, float eps, std::span<float> y) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * n, "K3 rms_norm: x"));
    TANDEM_RETURN_IF_ERROR(check_size(y.size(), rows * n, "K3 rms_norm: y"));
    TANDEM_TRY_ASSIGN(dx, upload(x, "K3 rms_norm: x"));
    device_memory dwt;
    if (weight) {
        TANDEM_TRY_ASSIGN(w, upload(std::span<const float>(weight, static_cast<size_t>(n)), "K3 rms_norm: weight"));
        dwt = std::move(w.value());
    }
    TANDEM_TRY_ASSIGN(dy, device_memory::alloc(static_cast<int64_t>(y.size_bytes()), "K3 rms_norm: y"));
    if (rows > 0) rms_norm_kernel<<<static_cast<unsigned>(rows), 256>>>(dx->get<float>(), n, dwt.get<float>(), eps, dy->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K3 rms_norm kernel"));
    return download(*dy, y, "K3 rms_norm: download");
}

status op_qdq_fp8(std::span<float> x, int64_t block, float amax_floor) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (block <= 0) return make_error(error_code::invalid_argument, "qdq_fp8: block must be positive");
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "qdq_fp8: x"));
    const int64_t n = static_cast<int64_t>(x.size()), blocks = (n + block - 1) / block;
    if (blocks > 0) qdq_fp8_kernel<<<blocks_for(blocks, 128), 128>>>(dx->get<float>(), n, block, amax_floor);
    TANDEM_RETURN_IF_ERROR(finish("qdq_fp8 kernel"));
    return download(*dx, x, "qdq_fp8: download");
}

status op_rope(std::span<float> x, int64_t rows, int64_t heads, int64_t dim, std::span<const float> inv_freq,
               std::span<const int64_t> pos, bool inverse) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * heads * dim, "rope: x"));
    TANDEM_RETURN_IF_ERROR(check_size(pos.size(), rows, "rope: pos"));
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    if (2 * half > dim) return make_error(error_code::invalid_argument, "rope: table wider than the head");
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "rope: x"));
    TANDEM_TRY_ASSIGN(df, upload(inv_freq, "rope: table"));
    TANDEM_TRY_ASSIGN(dp, upload(pos, "rope: positions"));
    if (rows > 0 && heads > 0)
        rope_kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), 64>>>(
            dx->get<float>(), heads, dim, df->get<float>(), half, dp->get<int64_t>(), inverse);
    TANDEM_RETURN_IF_ERROR(finish("rope kernel"));
    return download(*dx, x, "rope: download");
}

status op_hc_pre(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                 std::span<const float> scale, std::span<float> collapsed, std::span<float> post, std::span<float> comb) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (s.n < 1 || s.n > k_max_hc) return make_error(error_code::invalid_argument, "K2 hc_pre: hc_mult outside [1, 8]");
    const int64_t T = s.d > 0 ? static_cast<int64_t>(h.size()) / (s.n * s.d) : 0, n_mix = (2 + s.n) * s.n;
    TANDEM_RETURN_IF_ERROR(check_size(h.size(), T * s.n * s.d, "K2 hc_pre: h"));
    TANDEM_RETURN_IF_ERROR(check_size(fn.size(), n_mix * s.n * s.d, "K2 hc_pre: fn"));
    TANDEM_RETURN_IF_ERROR(check_size(base.size(), n_mix, "K2 hc_pre: base"));
    TANDEM_RETURN_IF_ERROR(check_size(scale.size(), 3, "K2 hc_pre: scale"));
    TANDEM_RETURN_IF_ERROR(check_size(collapsed.size(), T * s.d, "K2 hc_pre: collapsed"));
    TANDEM_RETURN_IF_ERROR(check_size(post.size(), T * s.n, "K2 hc_pre: post"));
    TANDEM_RETURN_IF_ERROR(check_size(comb.size(), T * s.n * s.n, "K2 hc_pre: comb"));
    TANDEM_TRY_ASSIGN(dh, upload(h, "K2: h"));
    TANDEM_TRY_ASSIGN(dfn, upload(fn, "K2: fn"));
    TANDEM_TRY_ASSIGN(db, upload(base, "K2: base"));
    TANDEM_TRY_ASSIGN(dsc, upload(scale, "K2: scale"));
    TANDEM_TRY_ASSIGN(dc, device_memory::alloc(static_cast<int64_t>(collapsed.size_bytes()), "K2: collapsed"));
    TANDEM_TRY_ASSIGN(dpo, device_memory::alloc(static_cast<int64_t>(post.size_bytes()), "K2: post"));
    TANDEM_TRY_ASSIGN(dco, device_memory::alloc(static_cast<int64_t>(comb.size_bytes()), "K2: comb"));
    if (T > 0)
        hc_pre_kernel<<<static_cast<unsigned>(T), 128>>>(s, dh->get<float>(), dfn->get<float>(), db->get<float>(),
                                                         dsc->get<float>(), dc->get<float>(), dpo->get<float>(),
                                                         dco->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K2 hc_pre kernel"));
    TANDEM_RETURN_IF_ERROR(download(*dc, collapsed, "K2: collapsed"));
    TANDEM_RETURN_IF_ERROR(download(*dpo, post, "K2: post"));
    return download(*dco, comb, "K2: comb");
}

status op_hc_post(int64_t n, int64_t d, std::span<const float> out, std::span<const float> h,
                  std::span<const float> post, std::span<const float> comb, std::span<float> h_new) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t T = d > 0 ? static_cast<int64_t>(out.size()) / d : 0;
    TANDEM_RETURN_IF_ERROR(check_size(h.size(), T * n * d, "K17 hc_post: h"));
    TANDEM_RETURN_IF_ERROR(check_size(post.size(), T * n, "K17 hc_post: post"));
    TANDEM_RETURN_IF_ERROR(check_size(comb.size(), T * n * n, "K17 hc_post: comb"));
    TANDEM_RETURN_IF_ERROR(check_size(h_new.size(), T * n * d, "K17 hc_post: h_new"));
    TANDEM_TRY_ASSIGN(dout, upload(out, "K17: out"));
    TANDEM_TRY_ASSIGN(dh, upload(h, "K17: h"));
    TANDEM_TRY_ASSIGN(dp, upload(post, "K17: post"));
    TANDEM_TRY_ASSIGN(dc, upload(comb, "K17: comb"));
    TANDEM_TRY_ASSIGN(dn, device_memory::alloc(static_cast<int64_t>(h_new.size_bytes()), "K17: h_new"));
    if (T > 0)
        hc_post_kernel<<<dim3(blocks_for(d, 128), static_cast<unsigned>(T)), 128>>>(
            n, d, dout->get<float>(), dh->get<float>(), dp->get<float>(), dc->get<float>(), dn->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K17 hc_post kernel"));
    return download(*dn, h_new, "K17: h_new");
}

status op_attention(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> keys,
                    int64_t max_keys, std::span<const int32_t> n_keys, std::span<const float> sinks, float scale,
                    std::span<float> out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(q.size(), tokens * heads * dim, "K13 attention: q"));
    TANDEM_RETURN_IF_ERROR(check_size(keys.size(), tokens * max_keys * dim, "K13 attention: keys"));
    TANDEM_RETURN_IF_ERROR(check_size(n_keys.size(), tokens, "K13 attention: n_keys"));
    TANDEM_RETURN_IF_ERROR(check_size(sinks.size(), heads, "K13 attention: sinks"));
    TANDEM_RETURN_IF_ERROR(check_size(out.size(), tokens * heads * dim, "K13 attention: out"));
    for (int32_t nk : n_keys)
        if (nk < 0 || nk > max_keys) return make_error(error_code::out_of_range, "K13 attention: key count outside [0, max_keys]");
    int max_smem = 0;
    TANDEM_CUDA_TRY(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "K13: shared memory limit");
    const int64_t smem = max_keys * static_cast<int64_t>(sizeof(float));
    if (smem > max_smem - 1024)
        return make_error(error_code::out_of_range, "K13 attention: " + std::to_string(max_keys) +
                                                        " keys per row exceed this kernel's shared-memory logits");
    TANDEM_TRY_ASSIGN(dq, upload(q, "K13: q"));
    TANDEM_TRY_ASSIGN(dk, upload(keys, "K13: keys"));
    TANDEM_TRY_ASSIGN(dn, upload(n_keys, "K13: n_keys"));
    TANDEM_TRY_ASSIGN(ds, upload(sinks, "K13: sinks"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "K13: out"));
    if (smem > 48 * 1024)
        TANDEM_CUDA_TRY(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)),
                        "K13: raising the shared-memory limit");
    if (tokens > 0 && heads > 0)
        attention_kernel<<<dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(heads)), 128,
                           static_cast<size_t>(smem)>>>(dq->get<float>(), heads, dim, dk->get<float>(), max_keys,
                                                        dn->get<int32_t>(), ds->get<float>(), scale, dout->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K13 attention kernel"));
    return download(*dout, out, "K13: out");
}

status op_argmax(std::span<const float> logits, int64_t rows, int64_t vocab, std::span<int32_t> ids) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(logits.size(), rows * vocab, "K18 argmax: logits"));
    TANDEM_RETURN_IF_ERROR(check_size(ids.size(), rows, "K18 argmax: ids"));
    if (vocab <= 0) return make_error(error_code::invalid_argument, "K18 argmax: empty vocabulary");
    TANDEM_TRY_ASSIGN(dl, upload(logits, "K18: logits"));
    TANDEM_TRY_ASSIGN(di, device_memory::alloc(static_cast<int64_t>(ids.size_bytes()), "K18: ids"));
    if (rows > 0) argmax_kernel<<<static_cast<unsigned>(rows), 32>>>(dl->get<float>(), vocab, di->get<int32_t>());
    TANDEM_RETURN_IF_ERROR(finish("K18 argmax kernel"));
    return download(*di, ids, "K18: ids");
}

status op_route(std::span<const float> logits, int64_t tokens, int64_t experts, std::span<const float> bias,
                std::span<const int32_t> tid2eid, std::span<const int32_t> token_ids, int32_t k, bool official,
                float scale, std::span<int32_t> expert_out, std::span<float> weight_out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (k < 1 || k > k_max_route || k > experts)
        return make_error(error_code::invalid_argument, "K15 route: k outside [1, min(16, experts)]");
    TANDEM_RETURN_IF_ERROR(check_size(logits.size(), tokens * experts, "K15 route: logits"));
    TANDEM_RETURN_IF_ERROR(check_size(expert_out.size(), tokens * k, "K15 route: experts"));
    TANDEM_RETURN_IF_ERROR(check_size(weight_out.size(), tokens * k, "K15 route: weights"));
    const bool hash = !tid2eid.empty();
    if (hash) {
        TANDEM_RETURN_IF_ERROR(check_size(token_ids.size(), tokens, "K15 route: token ids"));
        const int64_t vocab = static_cast<int64_t>(tid2eid.size()) / k;
        for (int32_t id : token_ids)
            if (id < 0 || id >= vocab) return make_error(error_code::out_of_range, "K15 route: token id outside tid2eid");
        for (int32_t e : tid2eid)
            if (e < 0 || e >= experts) return make_error(error_code::out_of_range, "K15 route: tid2eid names an unknown expert");
    } else if (!bias.empty()) {
        TANDEM_RETURN_IF_ERROR(check_size(bias.size(), experts, "K15 route: bias"));
    }
    TANDEM_TRY_ASSIGN(dl, upload(logits, "K15: logits"));
    TANDEM_TRY_ASSIGN(db, upload(bias, "K15: bias"));
    TANDEM_TRY_ASSIGN(dh, upload(tid2eid, "K15: tid2eid"));
    TANDEM_TRY_ASSIGN(dt, upload(token_ids, "K15: token ids"));
    TANDEM_TRY_ASSIGN(ds, device_memory::alloc(tokens * experts * 4, "K15: scores"));
    TANDEM_TRY_ASSIGN(dbi, device_memory::alloc(tokens * experts * 4, "K15: biased scores"));
    TANDEM_TRY_ASSIGN(de, device_memory::alloc(static_cast<int64_t>(expert_out.size_bytes()), "K15: experts"));
    TANDEM_TRY_ASSIGN(dw, device_memory::alloc(static_cast<int64_t>(weight_out.size_bytes()), "K15: weights"));
    if (tokens > 0)
        route_kernel<<<blocks_for(tokens, 64), 64>>>(dl->get<float>(), tokens, static_cast<int32_t>(experts),
                                                    hash ? nullptr : db->get<float>(), hash ? dh->get<int32_t>() : nullptr,
                                                    dt->get<int32_t>(), k, official, scale, ds->get<float>(),
                                                    dbi->get<float>(), de->get<int32_t>(), dw->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K15 route kernel"));
    TANDEM_RETURN_IF_ERROR(download(*de, expert_out, "K15: experts"));
    return download(*dw, weight_out, "K15: weights");
}

status op_swiglu(std::span<const float> g, std::span<const float> u, float limit, std::span<float> out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(u.size(), static_cast<int64_t>(g.size()), "swiglu: up"));
    TANDEM_RETURN_IF_ERROR(check_size(out.size(), static_cast<int64_t>(g.size()), "swiglu: out"));
    TANDEM_TRY_ASSIGN(dg, upload(g, "swiglu: gate"));
    TANDEM_TRY_ASSIGN(du, upload(u, "swiglu: up"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "swiglu: out"));
    const int64_t n = static_cast<int64_t>(g.size());
    if (n > 0) swiglu_kernel<<<blocks_for(n, 256), 256>>>(dg->get<float>(), du->get<float>(), n, limit, dout->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("swiglu kernel"));
    return download(*dout, out, "swiglu: out");
}

status op_moe_combine(std::span<const float> contrib, int64_t tokens, int32_t slots, int64_t d,
                      std::span<const float> shared, std::span<float> out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(contrib.size(), tokens * slots * d, "K16 combine: contributions"));
    TANDEM_RETURN_IF_ERROR(check_size(shared.size(), tokens * d, "K16 combine: shared"));
    TANDEM_RETURN_IF_ERROR(check_size(out.size(), tokens * d, "K16 combine: out"));
    TANDEM_TRY_ASSIGN(dc, upload(contrib, "K16: contributions"));
    TANDEM_TRY_ASSIGN(dsh, upload(shared, "K16: shared"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "K16: out"));
    if (tokens > 0 && d > 0)
        moe_combine_kernel<<<dim3(blocks_for(d, 128), static_cast<unsigned>(tokens)), 128>>>(
            dc->get<float>(), slots, d, dsh->get<float>(), dout->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K16 combine kernel"));
    return download(*dout, out, "K16: out");
}

status op_encode_rows(const k::row_codec& fmt, std::span<const float> values, std::span<uint8_t> rows) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (fmt.dims <= 0 || fmt.bytes <= 0) return make_error(error_code::invalid_argument, "encode rows: empty row format");
    const int64_t n = static_cast<int64_t>(values.size()) / fmt.dims;
    TANDEM_RETURN_IF_ERROR(check_size(values.size(), n * fmt.dims, "encode rows: values"));
    TANDEM_RETURN_IF_ERROR(check_size(rows.size(), n * fmt.bytes, "encode rows: rows"));
    TANDEM_TRY_ASSIGN(dv, upload(values, "encode rows: values"));
    TANDEM_TRY_ASSIGN(dr, device_memory::alloc(static_cast<int64_t>(rows.size_bytes()), "encode rows: rows"));
    if (n > 0) encode_rows_kernel<<<blocks_for(n, 64), 64>>>(fmt, dv->get<float>(), n, dr->get<uint8_t>());
    TANDEM_RETURN_IF_ERROR(finish("encode rows kernel"));
    return download(*dr, rows, "encode rows: download");
}

status op_decode_rows(const k::row_codec& fmt, std::span<const uint8_t> rows, std::span<float> values) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (fmt.dims <= 0 || fmt.bytes <= 0) return make_error(error_code::invalid_argument, "decode rows: empty row format");
    const int64_t n = static_cast<int64_t>(rows.size()) / fmt.bytes;
    TANDEM_RETURN_IF_ERROR(check_size(rows.size(), n * fmt.bytes, "decode rows: rows"));
    TANDEM_RETURN_IF_ERROR(check_size(values.size(), n * fmt.dims, "decode rows: values"));
    TANDEM_TRY_ASSIGN(dr, upload(rows, "decode rows: rows"));
    TANDEM_TRY_ASSIGN(dv, device_memory::alloc(static_cast<int64_t>(values.size_bytes()), "decode rows: values"));
    if (n > 0) decode_rows_kernel<<<blocks_for(n, 64), 64>>>(fmt, dr->get<uint8_t>(), n, dv->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("decode rows kernel"));
    return download(*dv, values, "decode rows: download");
}

status op_indexer_scores(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> w,
                         std::span<const float> keys, int64_t max_rows, std::span<const int32_t> n_rows, float idx_scale,
                         float head_scale, std::span<float> scores) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(q.size(), tokens * heads * dim, "K11 indexer: q"));
    TANDEM_RETURN_IF_ERROR(check_size(w.size(), tokens * heads, "K11 indexer: head weights"));
    TANDEM_RETURN_IF_ERROR(check_size(keys.size(), tokens * max_rows * dim, "K11 indexer: keys"));
    TANDEM_RETURN_IF_ERROR(check_size(n_rows.size(), tokens, "K11 indexer: row counts"));
    TANDEM_RETURN_IF_ERROR(check_size(scores.size(), tokens * max_rows, "K11 indexer: scores"));
    for (int32_t n : n_rows)
        if (n < 0 || n > max_rows) return make_error(error_code::out_of_range, "K11 indexer: row count outside [0, max_rows]");
    TANDEM_TRY_ASSIGN(dq, upload(q, "K11: q"));
    TANDEM_TRY_ASSIGN(dw, upload(w, "K11: head weights"));
    TANDEM_TRY_ASSIGN(dk, upload(keys, "K11: keys"));
    TANDEM_TRY_ASSIGN(dn, upload(n_rows, "K11: row counts"));
    TANDEM_TRY_ASSIGN(ds, device_memory::alloc(static_cast<int64_t>(scores.size_bytes()), "K11: scores"));
    if (tokens > 0 && max_rows > 0)
        indexer_scores_kernel<<<dim3(blocks_for(max_rows, 128), static_cast<unsigned>(tokens)), 128>>>(
            dq->get<float>(), heads, dim, dw->get<float>(), dk->get<float>(), max_rows, dn->get<int32_t>(), idx_scale,
            head_scale, ds->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K11 indexer scores kernel"));
    return download(*ds, scores, "K11: scores");
}

status op_compressor_pool(std::span<const float> rings, int64_t n, int64_t m, int64_t dim, bool overlap,
                          std::span<float> out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t slots = overlap ? 2 * m : m, F = 2 * (overlap ? 2 : 1) * dim;
    TANDEM_RETURN_IF_ERROR(check_size(rings.size(), n * slots * F, "K9 pool: rings"));
    TANDEM_RETURN_IF_ERROR(check_size(out.size(), n * dim, "K9 pool: out"));
    TANDEM_TRY_ASSIGN(dr, upload(rings, "K9: rings"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "K9: out"));
    if (n > 0 && dim > 0)
        compressor_pool_kernel<<<dim3(blocks_for(dim, 128), static_cast<unsigned>(n)), 128>>>(dr->get<float>(), m, dim,
                                                                                             overlap, dout->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("K9 compressor pool kernel"));
    return download(*dout, out, "K9: out");
}

status op_official_sim(official_sim kind, std::span<float> x, int64_t dim, int64_t nope) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (dim <= 0 || (kind == official_sim::indexer_fp4 && (dim & (dim - 1)) != 0) || nope < 0 || nope > dim)
        return make_error(error_code::invalid_argument, "official simulation: bad row shape");
    const int64_t rows = static_cast<int64_t>(x.size()) / dim;
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * dim, "official simulation: x"));
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "official simulation: x"));
    if (rows > 0) official_sim_kernel<<<blocks_for(rows, 64), 64>>>(kind, dx->get<float>(), rows, dim, nope);
    TANDEM_RETURN_IF_ERROR(finish("official simulation kernel"));
    return download(*dx, x, "official simulation: download");
}

result<bandwidth_result> measure_bandwidth(int64_t out, int64_t in, int64_t batch, int repeats) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    bandwidth_result r;
    cudaDeviceProp prop{};
    TANDEM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading GPU 0's properties");
    r.gpu = prop.name;
    const int64_t copy_bytes = int64_t{1} << 30;
    TANDEM_TRY_ASSIGN(a, device_memory::alloc(copy_bytes, "bandwidth: copy source"));
    TANDEM_TRY_ASSIGN(b, device_memory::alloc(copy_bytes, "bandwidth: copy destination"));
    TANDEM_TRY_ASSIGN(e0, cuda_event::create());
    TANDEM_TRY_ASSIGN(e1, cuda_event::create());
    TANDEM_CUDA_TRY(cudaMemset(a->get(), 1, copy_bytes), "bandwidth: fill");
    TANDEM_CUDA_TRY(cudaMemcpy(b->get(), a->get(), copy_bytes, cudaMemcpyDeviceToDevice), "bandwidth: warm-up copy");
    TANDEM_CUDA_TRY(cudaEventRecord(e0->get()), "bandwidth: event");
    for (int i = 0; i < repeats; ++i)
        TANDEM_CUDA_TRY(cudaMemcpyAsync(b->get(), a->get(), copy_bytes, cudaMemcpyDeviceToDevice), "bandwidth: copy");
    TANDEM_CUDA_TRY(cudaEventRecord(e1->get()), "bandwidth: event");
    TANDEM_TRY_ASSIGN(copy_ms, elapsed_ms(*e0, *e1));
    r.copy_gb_per_s = 2.0 * static_cast<double>(copy_bytes) * repeats / (*copy_ms * 1e-3) / 1e9;  // read + write

    const int64_t wbytes = out * in * 2;
    TANDEM_TRY_ASSIGN(w, device_memory::alloc(wbytes, "bandwidth: bf16 weight"));
    TANDEM_CUDA_TRY(cudaMemset(w->get(), 0x3c, wbytes), "bandwidth: weight fill");  // bf16 0x3c3c ≈ 0.0115
    TANDEM_TRY_ASSIGN(x, device_memory::alloc(batch * in * 4, "bandwidth: x"));
    TANDEM_CUDA_TRY(cudaMemset(x->get(), 0, batch * in * 4), "bandwidth: x fill");
    TANDEM_TRY_ASSIGN(y, device_memory::alloc(batch * out * 4, "bandwidth: y"));
    k::weight_view v;
    v.form = k::wform::bf16;
    v.rows = out;
    v.cols = in;
    v.data = w->get<const uint8_t>();
    const dim3 grid(blocks_for(out, 128), static_cast<unsigned>(batch));
    linear_kernel<<<grid, 128>>>(x->get<float>(), batch, v, y->get<float>());
    TANDEM_RETURN_IF_ERROR(finish("bandwidth: warm-up linear"));
    TANDEM_CUDA_TRY(cudaEventRecord(e0->get()), "bandwidth: event");
    for (int i = 0; i < repeats; ++i) linear_kernel<<<grid, 128>>>(x->get<float>(), batch, v, y->get<float>());
    TANDEM_CUDA_TRY(cudaEventRecord(e1->get()), "bandwidth: event");
    TANDEM_RETURN_IF_ERROR(finish("bandwidth: linear"));
    TANDEM_TRY_ASSIGN(lin_ms, elapsed_ms(*e0, *e1));
    r.linear_ms = *lin_ms / repeats;
    r.linear_gb_per_s = static_cast<double>(wbytes) * repeats / (*lin_ms * 1e-3) / 1e9;
    return r;
}

}  // namespace tandem::cuda
