// cuda/kernels_mhc_moe.cu — Phase-1 kernels of mHC and MoE, their launchers (kernel_launch.h) and
// host-buffer entry points (host/cuda_ops.h): K2 mHC pre with Sinkhorn, K17 mHC post, the K18 HC
// head collapse, K15 routing, SwiGLU (K5 epilogue), K16 combine, and the row moves of grouped MoE
// (gather, scatter, scale; plus an elementwise add). Rules shared by every kernels_*.cu:
// kernel_plumbing.cuh.
#include "cuda/kernel_launch.h"
#include "cuda/kernel_plumbing.cuh"

namespace tandem::cuda {

namespace {

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

// One block per row: the head weights in thread 0 (n fixed_dots over n·d), collapse in parallel (K18).
__global__ void hc_head_kernel(hc_shape s, const float* h, const float* fn, const float* base, const float* scale,
                               float* x) {
    __shared__ float pre[k_max_hc];
    const int64_t t = blockIdx.x, d = s.d;
    const float* ht = h + t * s.n * d;
    if (threadIdx.x == 0) k::hc_head_weights(s.n, d, s.norm_eps, s.hc_eps, ht, fn, base, scale, pre);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) x[t * d + e] = k::hc_collapse(s.n, d, pre, ht, e);
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
        b[e] = !tid2eid && bias ? s[e] + bias[e] : s[e];  // hash layers select by table: no bias
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

__global__ void scale_rows_kernel(float* x, int64_t n, const float* w) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[r * n + i] *= w[r];
}

__global__ void move_rows_kernel(const float* src, int64_t width, const int32_t* index, bool gather, float* dst) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= width) return;
    if (gather) dst[r * width + i] = src[static_cast<int64_t>(index[r]) * width + i];
    else dst[static_cast<int64_t>(index[r]) * width + i] = src[r * width + i];
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

__global__ void moe_combine_kernel(const float* contrib, int32_t slots, int64_t d, const float* shared, float* out) {
    const int64_t t = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const float* c = contrib + t * slots * d + j;
    out[t * d + j] = k::moe_combine_element([c, d](int32_t sl) { return c[sl * d]; }, slots, shared[t * d + j]);
}

}  // namespace

// ---- launchers (kernel_launch.h) ------------------------------------------------------------------

status launch_hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                     const float* scale, float* collapsed, float* post, float* comb, cudaStream_t stream) {
    if (s.n < 1 || s.n > k_max_hc) return make_error(error_code::invalid_argument, "K2 hc_pre: hc_mult outside [1, 8]");
    if (rows > 0)
        hc_pre_kernel<<<static_cast<unsigned>(rows), k_threads, 0, stream>>>(s, h, fn, base, scale, collapsed, post, comb);
    return cuda_launch_status("K2 hc_pre");
}

status launch_hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post,
                      const float* comb, float* h_new, cudaStream_t stream) {
    if (rows > 0 && d > 0)
        hc_post_kernel<<<dim3(blocks_for(d, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            n, d, out, h, post, comb, h_new);
    return cuda_launch_status("K17 hc_post");
}

status launch_hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                      const float* scale, float* x, cudaStream_t stream) {
    if (s.n < 1 || s.n > k_max_hc) return make_error(error_code::invalid_argument, "K18 hc_head: hc_mult outside [1, 8]");
    if (rows > 0) hc_head_kernel<<<static_cast<unsigned>(rows), k_threads, 0, stream>>>(s, h, fn, base, scale, x);
    return cuda_launch_status("K18 hc_head");
}

status launch_route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                    const int32_t* token_ids, int32_t k, bool official, float scale, float* scratch,
                    int32_t* expert_out, float* weight_out, cudaStream_t stream) {
    if (k < 1 || k > k_max_route || k > experts)
        return make_error(error_code::invalid_argument, "K15 route: k outside [1, min(16, experts)]");
    if (rows > 0)
        route_kernel<<<blocks_for(rows, 64), 64, 0, stream>>>(logits, rows, static_cast<int32_t>(experts), bias, tid2eid,
                                                             token_ids, k, official, scale, scratch,
                                                             scratch + rows * experts, expert_out, weight_out);
    return cuda_launch_status("K15 route");
}

status launch_swiglu(const float* g, const float* u, int64_t n, float limit, float* out, cudaStream_t stream) {
    if (n > 0) swiglu_kernel<<<blocks_for(n, k_threads), k_threads, 0, stream>>>(g, u, n, limit, out);
    return cuda_launch_status("swiglu");
}

status launch_moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out,
                          cudaStream_t stream) {
    if (rows > 0 && d > 0)
        moe_combine_kernel<<<dim3(blocks_for(d, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            contrib, slots, d, shared, out);
    return cuda_launch_status("K16 combine");
}

status launch_scale_rows(float* x, int64_t rows, int64_t n, const float* w, cudaStream_t stream) {
    if (rows > 0 && n > 0)
        scale_rows_kernel<<<dim3(blocks_for(n, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(x, n, w);
    return cuda_launch_status("scale rows");
}

namespace {
status launch_move_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, bool gather, float* dst,
                        cudaStream_t stream) {
    if (rows > 0 && width > 0)
        move_rows_kernel<<<dim3(blocks_for(width, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            src, width, index, gather, dst);
    return cuda_launch_status(gather ? "gather rows" : "scatter rows");
}
}  // namespace

status launch_gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst,
                          cudaStream_t stream) {
    return launch_move_rows(src, width, index, rows, true, dst, stream);
}

status launch_scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst,
                           cudaStream_t stream) {
    return launch_move_rows(src, width, index, rows, false, dst, stream);
}

status launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream) {
    if (n > 0) add_kernel<<<blocks_for(n, k_threads), k_threads, 0, stream>>>(a, b, n, out);
    return cuda_launch_status("add");
}

// ---- host-buffer entry points (host/cuda_ops.h) ---------------------------------------------------

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
    TANDEM_RETURN_IF_ERROR(launch_hc_pre(s, T, dh->get<float>(), dfn->get<float>(), db->get<float>(), dsc->get<float>(),
                                         dc->get<float>(), dpo->get<float>(), dco->get<float>(), 0));
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
    TANDEM_RETURN_IF_ERROR(launch_hc_post(n, d, T, dout->get<float>(), dh->get<float>(), dp->get<float>(),
                                          dc->get<float>(), dn->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K17 hc_post kernel"));
    return download(*dn, h_new, "K17: h_new");
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
    TANDEM_TRY_ASSIGN(scratch, device_memory::alloc(2 * tokens * experts * 4, "K15: scores"));
    TANDEM_TRY_ASSIGN(de, device_memory::alloc(static_cast<int64_t>(expert_out.size_bytes()), "K15: experts"));
    TANDEM_TRY_ASSIGN(dw, device_memory::alloc(static_cast<int64_t>(weight_out.size_bytes()), "K15: weights"));
    TANDEM_RETURN_IF_ERROR(launch_route(dl->get<float>(), tokens, experts, db->get<float>(), hash ? dh->get<int32_t>() : nullptr,
                                        dt->get<int32_t>(), k, official, scale, scratch->get<float>(), de->get<int32_t>(),
                                        dw->get<float>(), 0));
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
    TANDEM_RETURN_IF_ERROR(launch_swiglu(dg->get<float>(), du->get<float>(), n, limit, dout->get<float>(), 0));
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
    TANDEM_RETURN_IF_ERROR(launch_moe_combine(dc->get<float>(), tokens, slots, d, dsh->get<float>(), dout->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K16 combine kernel"));
    return download(*dout, out, "K16: out");
}

status op_hc_head(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                  std::span<const float> scale, std::span<float> x) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (s.n < 1 || s.n > k_max_hc || s.d <= 0) return make_error(error_code::invalid_argument, "K18 hc_head: bad shape");
    const int64_t T = static_cast<int64_t>(h.size()) / (s.n * s.d);
    TANDEM_RETURN_IF_ERROR(check_size(h.size(), T * s.n * s.d, "K18 hc_head: h"));
    TANDEM_RETURN_IF_ERROR(check_size(fn.size(), s.n * s.n * s.d, "K18 hc_head: fn"));
    TANDEM_RETURN_IF_ERROR(check_size(base.size(), s.n, "K18 hc_head: base"));
    TANDEM_RETURN_IF_ERROR(check_size(scale.size(), 1, "K18 hc_head: scale"));
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), T * s.d, "K18 hc_head: x"));
    TANDEM_TRY_ASSIGN(dh, upload(h, "K18: h"));
    TANDEM_TRY_ASSIGN(dfn, upload(fn, "K18: fn"));
    TANDEM_TRY_ASSIGN(db, upload(base, "K18: base"));
    TANDEM_TRY_ASSIGN(dsc, upload(scale, "K18: scale"));
    TANDEM_TRY_ASSIGN(dx, device_memory::alloc(static_cast<int64_t>(x.size_bytes()), "K18: x"));
    TANDEM_RETURN_IF_ERROR(launch_hc_head(s, T, dh->get<float>(), dfn->get<float>(), db->get<float>(), dsc->get<float>(),
                                          dx->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K18 hc_head kernel"));
    return download(*dx, x, "K18: x");
}

namespace {
// gather: src is the pool of rows, dst the moved rows; scatter the other way round. dst starts as
// the caller's buffer so a scatter leaves the rows it does not name as they were.
status op_move_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst,
                    bool gather) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t rows = static_cast<int64_t>(index.size());
    const int64_t moved = static_cast<int64_t>(gather ? dst.size() : src.size()), pool = static_cast<int64_t>(gather ? src.size() : dst.size());
    if (width <= 0 || pool % width != 0) return make_error(error_code::invalid_argument, "move rows: bad row width");
    TANDEM_RETURN_IF_ERROR(check_size(static_cast<size_t>(moved), rows * width, "move rows: moved rows"));
    for (int32_t i : index)
        if (i < 0 || i >= pool / width) return make_error(error_code::out_of_range, "move rows: index outside the rows");
    TANDEM_TRY_ASSIGN(ds, upload(src, "move rows: src"));
    TANDEM_TRY_ASSIGN(di, upload(index, "move rows: index"));
    TANDEM_TRY_ASSIGN(dd, upload(std::span<const float>(dst.data(), dst.size()), "move rows: dst"));
    TANDEM_RETURN_IF_ERROR(gather ? launch_gather_rows(ds->get<float>(), width, di->get<int32_t>(), rows, dd->get<float>(), 0)
                                  : launch_scatter_rows(ds->get<float>(), width, di->get<int32_t>(), rows, dd->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish(gather ? "gather rows kernel" : "scatter rows kernel"));
    return download(*dd, dst, "move rows: dst");
}
}  // namespace

status op_gather_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst) {
    return op_move_rows(src, width, index, dst, true);
}

status op_scatter_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst) {
    return op_move_rows(src, width, index, dst, false);
}

status op_scale_rows(std::span<float> x, int64_t width, std::span<const float> w) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t rows = static_cast<int64_t>(w.size());
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * width, "scale rows: x"));
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "scale rows: x"));
    TANDEM_TRY_ASSIGN(dw, upload(w, "scale rows: w"));
    TANDEM_RETURN_IF_ERROR(launch_scale_rows(dx->get<float>(), rows, width, dw->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("scale rows kernel"));
    return download(*dx, x, "scale rows: x");
}

status op_add(std::span<const float> a, std::span<const float> b, std::span<float> out) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(b.size(), static_cast<int64_t>(a.size()), "add: b"));
    TANDEM_RETURN_IF_ERROR(check_size(out.size(), static_cast<int64_t>(a.size()), "add: out"));
    TANDEM_TRY_ASSIGN(da, upload(a, "add: a"));
    TANDEM_TRY_ASSIGN(db, upload(b, "add: b"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "add: out"));
    TANDEM_RETURN_IF_ERROR(launch_add(da->get<float>(), db->get<float>(), static_cast<int64_t>(a.size()), dout->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("add kernel"));
    return download(*dout, out, "add: out");
}

}  // namespace tandem::cuda
