// cuda/kernels_linear.cu — Phase-1 kernels of the linear family, their launchers
// (kernel_launch.h) and host-buffer entry points (host/cuda_ops.h): K1 embedding + HC expand, linear over every stored weight form (K4/K5/K6 math),
// K3 RMSNorm, FP8 activation QDQ, the official K8/K10 simulations, K18 greedy argmax; and the
// GPU check's bandwidth micro-benchmark. Rules shared by every kernels_*.cu: kernel_plumbing.cuh.
#include "cuda/kernel_launch.h"
#include "cuda/kernel_plumbing.cuh"

namespace tandem::cuda {

namespace {

__global__ void embed_expand_kernel(k::weight_view embed, const int32_t* ids, int64_t hc, float* h) {
    const int64_t t = blockIdx.x, d = embed.cols;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
        const float v = embed.at(ids[t], e);
        for (int64_t j = 0; j < hc; ++j) h[(t * hc + j) * d + e] = v;
    }
}

// One thread per (row, output column); x and y rows may be strided (a column slice of a wider buffer).
__global__ void linear_kernel(const float* x, int64_t ldx, k::weight_view w, float* y, int64_t ldy) {
    const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (o < w.rows) y[r * ldy + o] = k::linear_output(x + r * ldx, w, o);
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

// One thread per (row, block); blocks never straddle rows.
__global__ void qdq_fp8_kernel(float* x, int64_t rows, int64_t n, int64_t block, float amax_floor) {
    const int64_t per_row = (n + block - 1) / block, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row, b0 = (i % per_row) * block;
    k::qdq_e4m3_block(x + r * n + b0, (n - b0) < block ? (n - b0) : block, amax_floor);
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

}  // namespace

// ---- launchers (kernel_launch.h) ------------------------------------------------------------------

status launch_embed_expand(const k::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc, float* h,
                           cudaStream_t stream) {
    if (rows > 0) embed_expand_kernel<<<static_cast<unsigned>(rows), k_threads, 0, stream>>>(embed, ids, hc, h);
    return cuda_launch_status("K1 embed");
}

status launch_linear(const float* x, int64_t ldx, int64_t rows, const k::weight_view& w, float* y, int64_t ldy,
                     cudaStream_t stream) {
    if (rows > 0 && w.rows > 0)
        linear_kernel<<<dim3(blocks_for(w.rows, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(x, ldx, w, y,
                                                                                                              ldy);
    return cuda_launch_status("linear");
}

status launch_qdq_fp8(float* x, int64_t rows, int64_t n, int64_t block, float amax_floor, cudaStream_t stream) {
    if (block <= 0) return make_error(error_code::invalid_argument, "FP8 QDQ: block must be positive");
    const int64_t blocks = rows * ((n + block - 1) / block);
    if (blocks > 0) qdq_fp8_kernel<<<blocks_for(blocks, k_threads), k_threads, 0, stream>>>(x, rows, n, block, amax_floor);
    return cuda_launch_status("FP8 QDQ");
}

status launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                       cudaStream_t stream) {
    if (rows > 0) rms_norm_kernel<<<static_cast<unsigned>(rows), k_threads, 0, stream>>>(x, n, weight, eps, y);
    return cuda_launch_status("K3 rms_norm");
}

status launch_official_sim(official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope, cudaStream_t stream) {
    if (rows > 0) official_sim_kernel<<<blocks_for(rows, 64), 64, 0, stream>>>(kind, x, rows, dim, nope);
    return cuda_launch_status("official simulation");
}

status launch_argmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, cudaStream_t stream) {
    if (rows > 0) argmax_kernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(logits, vocab, ids);
    return cuda_launch_status("K18 argmax");
}

// ---- host-buffer entry points (host/cuda_ops.h) ---------------------------------------------------

status op_embed_expand(const k::weight_view& embed, std::span<const int32_t> ids, int64_t hc, std::span<float> h) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t T = static_cast<int64_t>(ids.size());
    TANDEM_RETURN_IF_ERROR(check_size(h.size(), T * hc * embed.cols, "K1 embed: h"));
    for (int32_t id : ids)
        if (id < 0 || id >= embed.rows) return make_error(error_code::out_of_range, "K1 embed: token id outside the vocabulary");
    TANDEM_TRY_ASSIGN(w, upload_weight(embed));
    TANDEM_TRY_ASSIGN(d_ids, upload(ids, "K1 embed: ids"));
    TANDEM_TRY_ASSIGN(d_h, device_memory::alloc(static_cast<int64_t>(h.size_bytes()), "K1 embed: h"));
    TANDEM_RETURN_IF_ERROR(launch_embed_expand(w->view, d_ids->get<int32_t>(), T, hc, d_h->get<float>(), 0));
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
    TANDEM_RETURN_IF_ERROR(launch_linear(dx->get<float>(), w.cols, rows, dw->view, dy->get<float>(), w.rows, 0));
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
    TANDEM_RETURN_IF_ERROR(launch_rms_norm(dx->get<float>(), rows, n, dwt.get<float>(), eps, dy->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K3 rms_norm kernel"));
    return download(*dy, y, "K3 rms_norm: download");
}

status op_qdq_fp8(std::span<float> x, int64_t block, float amax_floor) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (block <= 0) return make_error(error_code::invalid_argument, "qdq_fp8: block must be positive");
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "qdq_fp8: x"));
    // The whole buffer as one row: blocks run across it, as the CPU's act_quant over a flat span.
    TANDEM_RETURN_IF_ERROR(launch_qdq_fp8(dx->get<float>(), 1, static_cast<int64_t>(x.size()), block, amax_floor, 0));
    TANDEM_RETURN_IF_ERROR(finish("qdq_fp8 kernel"));
    return download(*dx, x, "qdq_fp8: download");
}

status op_argmax(std::span<const float> logits, int64_t rows, int64_t vocab, std::span<int32_t> ids) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    TANDEM_RETURN_IF_ERROR(check_size(logits.size(), rows * vocab, "K18 argmax: logits"));
    TANDEM_RETURN_IF_ERROR(check_size(ids.size(), rows, "K18 argmax: ids"));
    if (vocab <= 0) return make_error(error_code::invalid_argument, "K18 argmax: empty vocabulary");
    TANDEM_TRY_ASSIGN(dl, upload(logits, "K18: logits"));
    TANDEM_TRY_ASSIGN(di, device_memory::alloc(static_cast<int64_t>(ids.size_bytes()), "K18: ids"));
    TANDEM_RETURN_IF_ERROR(launch_argmax(dl->get<float>(), rows, vocab, di->get<int32_t>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K18 argmax kernel"));
    return download(*di, ids, "K18: ids");
}

status op_official_sim(official_sim kind, std::span<float> x, int64_t dim, int64_t nope) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    if (dim <= 0 || (kind == official_sim::indexer_fp4 && (dim & (dim - 1)) != 0) || nope < 0 || nope > dim)
        return make_error(error_code::invalid_argument, "official simulation: bad row shape");
    const int64_t rows = static_cast<int64_t>(x.size()) / dim;
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), rows * dim, "official simulation: x"));
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "official simulation: x"));
    TANDEM_RETURN_IF_ERROR(launch_official_sim(kind, dx->get<float>(), rows, dim, nope, 0));
    TANDEM_RETURN_IF_ERROR(finish("official simulation kernel"));
    return download(*dx, x, "official simulation: download");
}

result<double> measure_copy_gb_per_s(int repeats) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
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
    return 2.0 * static_cast<double>(copy_bytes) * repeats / (*copy_ms * 1e-3) / 1e9;  // read + write
}

result<bandwidth_result> measure_bandwidth(int64_t out, int64_t in, int64_t batch, int repeats) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    bandwidth_result r;
    cudaDeviceProp prop{};
    TANDEM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading GPU 0's properties");
    r.gpu = prop.name;
    TANDEM_TRY_ASSIGN(copy, measure_copy_gb_per_s(repeats));
    r.copy_gb_per_s = *copy;
    TANDEM_TRY_ASSIGN(e0, cuda_event::create());
    TANDEM_TRY_ASSIGN(e1, cuda_event::create());

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
    TANDEM_RETURN_IF_ERROR(launch_linear(x->get<float>(), in, batch, v, y->get<float>(), out, 0));
    TANDEM_RETURN_IF_ERROR(finish("bandwidth: warm-up linear"));
    TANDEM_CUDA_TRY(cudaEventRecord(e0->get()), "bandwidth: event");
    for (int i = 0; i < repeats; ++i)
        TANDEM_RETURN_IF_ERROR(launch_linear(x->get<float>(), in, batch, v, y->get<float>(), out, 0));
    TANDEM_CUDA_TRY(cudaEventRecord(e1->get()), "bandwidth: event");
    TANDEM_RETURN_IF_ERROR(finish("bandwidth: linear"));
    TANDEM_TRY_ASSIGN(lin_ms, elapsed_ms(*e0, *e1));
    r.linear_ms = *lin_ms / repeats;
    r.linear_gb_per_s = static_cast<double>(wbytes) * repeats / (*lin_ms * 1e-3) / 1e9;
    return r;
}

}  // namespace tandem::cuda
