// cuda/kernels_attention.cu — Phase-1 kernels of the attention family, their launchers
// (kernel_launch.h) and host-buffer entry points (host/cuda_ops.h): RoPE (K7/K8/K13 epilogue), K13 attention with sink, cache row store and
// read for every row format (K8/K9 store, the attention read path), K11 indexer scores, K9 compressor
// pooling and the per-step ring update around it. Rules shared by every kernels_*.cu: kernel_plumbing.cuh.
#include "cuda/kernel_launch.h"
#include "cuda/kernel_plumbing.cuh"

namespace tandem::cuda {

namespace {

// One thread per (row, head, rotated pair).
__global__ void rope_kernel(float* x, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                            const int64_t* pos, bool inverse) {
    const int64_t r = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= heads * half) return;
    const int64_t h = i / half, p = i % half;
    k::rope_pair(x + (r * heads + h) * dim + dim - 2 * half, p, inv_freq[p], pos[r], inverse);
}

// One block per (row, head); logits live in dynamic shared memory (max_keys floats). The row's
// keys are key_rows[key_index[row, j]] for j < n_keys[row] (K = V), wherever they sit.
__global__ void attention_kernel(const float* q, int64_t heads, int64_t dim, const float* key_rows,
                                 const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, const float* sinks,
                                 float scale, float* out) {
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

// One thread per row; rows are addressed one by one (pool rows are scattered over pages).
__global__ void encode_rows_kernel(k::row_codec f, const float* values, int64_t n, uint8_t* const* dst) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n) k::encode_row(f, values + r * f.dims, dst[r]);
}

__global__ void decode_rows_kernel(k::row_codec f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                                   float* values) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n && (!keep || keep[r])) k::decode_row(f, src[r], values + r * f.dims);
}

// One thread per (row, candidate key); keys indexed as in attention_kernel.
__global__ void indexer_scores_kernel(const float* q, int64_t heads, int64_t dim, const float* w, const float* key_rows,
                                      const int32_t* key_index, int64_t max_keys, const int32_t* n_keys,
                                      float idx_scale, float head_scale, float* scores) {
    const int64_t t = blockIdx.y, j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= max_keys) return;
    scores[t * max_keys + j] =
        j < n_keys[t] ? k::indexer_score(q + t * heads * dim, key_rows + static_cast<int64_t>(key_index[t * max_keys + j]) * dim,
                                         heads, dim, w + t * heads, idx_scale, head_scale)
                      : 0.0f;
}

// One thread per (window, feature).
__global__ void compressor_pool_kernel(const float* rings, int64_t m, int64_t dim, bool overlap, float* out) {
    const int64_t win = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= dim) return;
    const int64_t slots = overlap ? 2 * m : m, F = 2 * (overlap ? 2 : 1) * dim;
    out[win * dim + e] = k::compressor_pool_feature(rings + win * slots * F, m, dim, overlap, e);
}

// K8 kv path, one block per row: the norm's inverse in thread 0, the element loop and the RoPE
// pairs across the block, then the FP8 simulation and the storage round trip in thread 0 (as the
// official-sim and row-codec kernels do, one thread per row) — kmath::kv_path_row's steps.
__global__ void kv_path_kernel(float* x, int64_t dim, const float* norm_w, float eps, const float* inv_freq, int64_t half,
                               const int64_t* pos, bool official, int64_t nope, k::row_codec f, uint8_t* bytes) {
    __shared__ float inv;
    const int64_t r = blockIdx.x;
    float* row = x + r * dim;
    if (threadIdx.x == 0) inv = k::rms_inverse(row, dim, eps);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = k::rms_apply(row[i], norm_w, i, inv);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) k::rope_pair(row + dim - 2 * half, i, inv_freq[i], pos[r], false);
    __syncthreads();
    if (threadIdx.x == 0) k::kv_path_finish(row, dim, official, nope, f, bytes + r * f.bytes);
}

// K10 q path: one thread per (row, head).
__global__ void indexer_q_path_kernel(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq,
                                      int64_t half, const int64_t* pos, bool official) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * heads) return;
    k::indexer_q_head(x + i * dim, dim, inv_freq, half, pos[i / heads], official);
}

// One thread per (sequence, feature): the sequence's tokens in order through its ring columns
// (kmath::compressor_feed_feature says why no two threads touch the same ring element).
__global__ void compressor_update_kernel(const float* kv, const float* gate, const float* ape, float* const* rings,
                                         const int64_t* seq, int64_t m, int64_t dim, bool overlap, float* pooled) {
    const int64_t s = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= dim) return;
    const int64_t* q = seq + 4 * s;  // row0, rows, start, emit0
    const int64_t cd = (overlap ? 2 : 1) * dim;
    k::compressor_feed_feature(kv + q[0] * cd, gate + q[0] * cd, ape, rings[s], q[1], q[2], m, dim, overlap,
                               pooled + q[3] * dim, e);
}

}  // namespace

// ---- launchers (kernel_launch.h) ------------------------------------------------------------------

status launch_rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                   const int64_t* pos, bool inverse, cudaStream_t stream) {
    if (rows > 0 && heads > 0 && half > 0)
        rope_kernel<<<dim3(blocks_for(heads * half, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            x, heads, dim, inv_freq, half, pos, inverse);
    return cuda_launch_status("RoPE");
}

status launch_attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows,
                        const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, const float* sinks,
                        float scale, float* out, cudaStream_t stream) {
    if (rows <= 0 || heads <= 0) return status::ok();
    const int64_t smem = max_keys * static_cast<int64_t>(sizeof(float));
    if (smem > 48 * 1024) {
        int device = 0, max_smem = 0;
        TANDEM_CUDA_TRY(cudaGetDevice(&device), "K13: current GPU");
        TANDEM_CUDA_TRY(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                        "K13: shared memory limit");
        if (smem > max_smem - 1024)
            return make_error(error_code::out_of_range, "K13 attention: " + std::to_string(max_keys) +
                                                            " keys per row exceed this kernel's shared-memory logits");
        TANDEM_CUDA_TRY(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)),
                        "K13: raising the shared-memory limit");
    }
    attention_kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), k_threads,
                       static_cast<size_t>(smem), stream>>>(q, heads, dim, key_rows, key_index, max_keys, n_keys, sinks,
                                                            scale, out);
    return cuda_launch_status("K13 attention");
}

status launch_indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w,
                             const float* key_rows, const int32_t* key_index, int64_t max_keys, const int32_t* n_keys,
                             float idx_scale, float head_scale, float* scores, cudaStream_t stream) {
    if (rows > 0 && max_keys > 0)
        indexer_scores_kernel<<<dim3(blocks_for(max_keys, k_threads), static_cast<unsigned>(rows)), k_threads, 0, stream>>>(
            q, heads, dim, w, key_rows, key_index, max_keys, n_keys, idx_scale, head_scale, scores);
    return cuda_launch_status("K11 indexer scores");
}

status launch_encode_rows(const k::row_codec& f, const float* values, int64_t n, uint8_t* const* dst,
                          cudaStream_t stream) {
    if (n > 0) encode_rows_kernel<<<blocks_for(n, 64), 64, 0, stream>>>(f, values, n, dst);
    return cuda_launch_status("row store");
}

status launch_decode_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                          float* values, cudaStream_t stream) {
    if (n > 0) decode_rows_kernel<<<blocks_for(n, 64), 64, 0, stream>>>(f, src, n, keep, values);
    return cuda_launch_status("row read");
}

status launch_kv_path(float* x, int64_t rows, int64_t dim, const float* norm_w, float eps, const float* inv_freq,
                      int64_t half, const int64_t* pos, bool official, int64_t nope, const k::row_codec& f,
                      uint8_t* bytes, cudaStream_t stream) {
    if (rows > 0 && dim > 0)
        kv_path_kernel<<<static_cast<unsigned>(rows), k_threads, 0, stream>>>(x, dim, norm_w, eps, inv_freq, half, pos, official,
                                                                             nope, f, bytes);
    return cuda_launch_status("K8 kv path");
}

status launch_indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                             const int64_t* pos, bool official, cudaStream_t stream) {
    if (rows > 0 && heads > 0)
        indexer_q_path_kernel<<<blocks_for(rows * heads, 64), 64, 0, stream>>>(x, rows, heads, dim, inv_freq, half, pos,
                                                                              official);
    return cuda_launch_status("K10 indexer q path");
}

status launch_compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings,
                                const int64_t* seq, int64_t seqs, int64_t m, int64_t dim, bool overlap, float* pooled,
                                cudaStream_t stream) {
    if (seqs > 0 && dim > 0)
        compressor_update_kernel<<<dim3(blocks_for(dim, k_threads), static_cast<unsigned>(seqs)), k_threads, 0, stream>>>(
            kv, gate, ape, rings, seq, m, dim, overlap, pooled);
    return cuda_launch_status("K9 compressor update");
}

status launch_compressor_pool(const float* rings, int64_t n, int64_t m, int64_t dim, bool overlap, float* out,
                              cudaStream_t stream) {
    if (n > 0 && dim > 0)
        compressor_pool_kernel<<<dim3(blocks_for(dim, k_threads), static_cast<unsigned>(n)), k_threads, 0, stream>>>(
            rings, m, dim, overlap, out);
    return cuda_launch_status("K9 compressor pool");
}

// ---- host-buffer entry points (host/cuda_ops.h) ---------------------------------------------------
// The parity harness hands keys and rows as dense host arrays; these build the index / address
// arrays the kernels take, so the harness runs the executor's kernels unchanged.

namespace {

// key_index[t, j] = t · max_keys + j: each row's own block of max_keys dense keys.
result<device_memory> dense_key_index(int64_t rows, int64_t max_keys, const char* what) {
    if (rows * max_keys > INT32_MAX) return make_error(error_code::out_of_range, std::string(what) + ": too many keys for int32 indices");
    std::vector<int32_t> idx(static_cast<size_t>(rows * max_keys));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    return upload(std::span<const int32_t>(idx), what);
}

// The device addresses of n consecutive rows of `bytes` starting at base.
result<device_memory> row_addresses(uint8_t* base, int64_t n, int64_t bytes, const char* what) {
    std::vector<uint8_t*> addr(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) addr[static_cast<size_t>(r)] = base + r * bytes;
    return upload(std::span<uint8_t* const>(addr), what);
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
    TANDEM_RETURN_IF_ERROR(launch_rope(dx->get<float>(), rows, heads, dim, df->get<float>(), half, dp->get<int64_t>(), inverse, 0));
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
    TANDEM_TRY_ASSIGN(dq, upload(q, "K13: q"));
    TANDEM_TRY_ASSIGN(dk, upload(keys, "K13: keys"));
    TANDEM_TRY_ASSIGN(di, dense_key_index(tokens, max_keys, "K13: key index"));
    TANDEM_TRY_ASSIGN(dn, upload(n_keys, "K13: n_keys"));
    TANDEM_TRY_ASSIGN(ds, upload(sinks, "K13: sinks"));
    TANDEM_TRY_ASSIGN(dout, device_memory::alloc(static_cast<int64_t>(out.size_bytes()), "K13: out"));
    TANDEM_RETURN_IF_ERROR(launch_attention(dq->get<float>(), tokens, heads, dim, dk->get<float>(), di->get<int32_t>(),
                                            max_keys, dn->get<int32_t>(), ds->get<float>(), scale, dout->get<float>(), 0));
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
    TANDEM_TRY_ASSIGN(da, row_addresses(dr->get<uint8_t>(), n, fmt.bytes, "encode rows: addresses"));
    TANDEM_RETURN_IF_ERROR(launch_encode_rows(fmt, dv->get<float>(), n, da->get<uint8_t* const>(), 0));
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
    TANDEM_TRY_ASSIGN(da, row_addresses(dr->get<uint8_t>(), n, fmt.bytes, "decode rows: addresses"));
    TANDEM_RETURN_IF_ERROR(launch_decode_rows(fmt, da->get<const uint8_t* const>(), n, nullptr, dv->get<float>(), 0));
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
    TANDEM_TRY_ASSIGN(di, dense_key_index(tokens, max_rows, "K11: key index"));
    TANDEM_TRY_ASSIGN(dn, upload(n_rows, "K11: row counts"));
    TANDEM_TRY_ASSIGN(ds, device_memory::alloc(static_cast<int64_t>(scores.size_bytes()), "K11: scores"));
    TANDEM_RETURN_IF_ERROR(launch_indexer_scores(dq->get<float>(), tokens, heads, dim, dw->get<float>(), dk->get<float>(),
                                                 di->get<int32_t>(), max_rows, dn->get<int32_t>(), idx_scale, head_scale,
                                                 ds->get<float>(), 0));
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
    TANDEM_RETURN_IF_ERROR(launch_compressor_pool(dr->get<float>(), n, m, dim, overlap, dout->get<float>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K9 compressor pool kernel"));
    return download(*dout, out, "K9: out");
}

status op_kv_path(std::span<float> x, int64_t dim, std::span<const float> norm_w, float eps, std::span<const float> inv_freq,
                  std::span<const int64_t> pos, bool official, int64_t nope, const k::row_codec& fmt, std::span<uint8_t> rows) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t T = static_cast<int64_t>(pos.size()), half = static_cast<int64_t>(inv_freq.size());
    if (dim <= 0 || fmt.dims != dim || 2 * half > dim || nope < 0 || nope > dim)
        return make_error(error_code::invalid_argument, "K8 kv path: bad row shape");
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), T * dim, "K8 kv path: x"));
    TANDEM_RETURN_IF_ERROR(check_size(norm_w.size(), dim, "K8 kv path: norm weight"));
    TANDEM_RETURN_IF_ERROR(check_size(rows.size(), T * fmt.bytes, "K8 kv path: rows"));
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "K8: x"));
    TANDEM_TRY_ASSIGN(dw, upload(norm_w, "K8: norm weight"));
    TANDEM_TRY_ASSIGN(df, upload(inv_freq, "K8: RoPE table"));
    TANDEM_TRY_ASSIGN(dp, upload(pos, "K8: positions"));
    TANDEM_TRY_ASSIGN(dr, device_memory::alloc(static_cast<int64_t>(rows.size_bytes()), "K8: rows"));
    TANDEM_RETURN_IF_ERROR(launch_kv_path(dx->get<float>(), T, dim, dw->get<float>(), eps, df->get<float>(), half,
                                          dp->get<int64_t>(), official, nope, fmt, dr->get<uint8_t>(), 0));
    TANDEM_RETURN_IF_ERROR(finish("K8 kv path kernel"));
    TANDEM_RETURN_IF_ERROR(download(*dx, x, "K8: x"));
    return download(*dr, rows, "K8: rows");
}

status op_indexer_q_path(std::span<float> x, int64_t heads, int64_t dim, std::span<const float> inv_freq,
                         std::span<const int64_t> pos, bool official) {
    TANDEM_RETURN_IF_ERROR(need_gpu());
    const int64_t T = static_cast<int64_t>(pos.size()), half = static_cast<int64_t>(inv_freq.size());
    if (dim <= 0 || 2 * half > dim || (dim & (dim - 1)) != 0)
        return make_error(error_code::invalid_argument, "K10 indexer q path: bad head shape");
    TANDEM_RETURN_IF_ERROR(check_size(x.size(), T * heads * dim, "K10 indexer q path: x"));
    TANDEM_TRY_ASSIGN(dx, upload(std::span<const float>(x.data(), x.size()), "K10: x"));
    TANDEM_TRY_ASSIGN(df, upload(inv_freq, "K10: RoPE table"));
    TANDEM_TRY_ASSIGN(dp, upload(pos, "K10: positions"));
    TANDEM_RETURN_IF_ERROR(launch_indexer_q_path(dx->get<float>(), T, heads, dim, df->get<float>(), half, dp->get<int64_t>(),
                                                 official, 0));
    TANDEM_RETURN_IF_ERROR(finish("K10 indexer q path kernel"));
    return download(*dx, x, "K10: x");
}

}  // namespace tandem::cuda
