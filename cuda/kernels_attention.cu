// cuda/kernels_attention.cu — Phase-1 kernels of the attention family and their host-buffer entry
// points (host/cuda_ops.h): RoPE (K7/K8/K13 epilogue), K13 attention with sink, cache row store and
// read for every row format (K8/K9 store, the attention read path), K11 indexer scores, K9 compressor
// pooling. Rules shared by every kernels_*.cu: kernel_plumbing.cuh.
#include "cuda/kernel_plumbing.cuh"

namespace tandem::cuda {

namespace {

__global__ void rope_kernel(float* x, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                            const int64_t* pos, bool inverse) {
    const int64_t row = blockIdx.x, h = blockIdx.y;
    float* head = x + (row * heads + h) * dim + (dim - 2 * half);
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) k::rope_pair(head, i, inv_freq[i], pos[row], inverse);
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

}  // namespace

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

}  // namespace tandem::cuda
