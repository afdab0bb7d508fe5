// cuda/kernel_launch.h — (cuda/ internal) the launchers of the phase-1 kernels: device pointers in,
// one launch on `stream`, nothing synchronised. Every kernel exists once, in kernels_*.cu, behind one
// of these; the device executor (device_runtime.cu) and the parity harness's host-buffer entry
// points (host/cuda_ops.h, which upload, launch through here and download) both call them, so the
// parity tiers test exactly the kernels that serve.
//
// Each launcher returns the launch error (a bad configuration, an unsupported shape) as a status
// naming the op; execution errors surface at the caller's next synchronisation. Shapes and
// semantics are those of host/device_runtime.h, whose methods map one to one onto these.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "cuda/host/cuda_ops.h"

namespace tandem::cuda {

// ---- kernels_linear.cu ----------------------------------------------------------------------------
status launch_embed_expand(const kmath::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc, float* h,
                           cudaStream_t stream);
status launch_linear(const float* x, int64_t ldx, int64_t rows, const kmath::weight_view& w, float* y, int64_t ldy,
                     cudaStream_t stream);
// FP8 QDQ of each row of n in blocks of `block` (the last block of a row may be short), in place.
status launch_qdq_fp8(float* x, int64_t rows, int64_t n, int64_t block, float amax_floor, cudaStream_t stream);
status launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                       cudaStream_t stream);
status launch_official_sim(official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope, cudaStream_t stream);
status launch_argmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, cudaStream_t stream);

// ---- kernels_attention.cu -------------------------------------------------------------------------
status launch_rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                   const int64_t* pos, bool inverse, cudaStream_t stream);
// Raises the kernel's dynamic shared-memory limit when max_keys needs it; refuses past the GPU's.
status launch_attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows,
                        const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, const float* sinks,
                        float scale, float* out, cudaStream_t stream);
status launch_indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w,
                             const float* key_rows, const int32_t* key_index, int64_t max_keys, const int32_t* n_keys,
                             float idx_scale, float head_scale, float* scores, cudaStream_t stream);
status launch_encode_rows(const kmath::row_codec& f, const float* values, int64_t n, uint8_t* const* dst,
                          cudaStream_t stream);
// keep: null decodes every row, else only rows with keep[i] != 0.
status launch_decode_rows(const kmath::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                          float* values, cudaStream_t stream);
// K9 pooling of n closed windows: rings [n, slots, F] → out [n, dim].
status launch_compressor_pool(const float* rings, int64_t n, int64_t m, int64_t dim, bool overlap, float* out,
                              cudaStream_t stream);
// K8 kv path and K10 indexer q path, fused (device_runtime::kv_path / indexer_q_path).
status launch_kv_path(float* x, int64_t rows, int64_t dim, const float* norm_w, float eps, const float* inv_freq,
                      int64_t half, const int64_t* pos, bool official, int64_t nope, const kmath::row_codec& f,
                      uint8_t* bytes, cudaStream_t stream);
status launch_indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                             const int64_t* pos, bool official, cudaStream_t stream);
// K9 ring update + pooling of one compressor over a step (device_runtime::compressor_update).
status launch_compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings,
                                const int64_t* seq, int64_t seqs, int64_t m, int64_t dim, bool overlap, float* pooled,
                                cudaStream_t stream);

// ---- kernels_topk.cu ------------------------------------------------------------------------------
// K12 and its epilogue (device_runtime::top_k / place_selected).
status launch_top_k(const float* scores, int64_t rows, int64_t ld, const int32_t* n_cand, int64_t k, int32_t* sel,
                    int32_t* tied, cudaStream_t stream);
status launch_place_selected(const int32_t* sel, int64_t rows, int64_t k, const int32_t* at, const int32_t* base,
                             int32_t* key_index, int64_t ld, int32_t* keep, cudaStream_t stream);

// ---- kernels_mhc_moe.cu ---------------------------------------------------------------------------
status launch_hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                     const float* scale, float* collapsed, float* post, float* comb, cudaStream_t stream);
status launch_hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post,
                      const float* comb, float* h_new, cudaStream_t stream);
status launch_hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                      const float* scale, float* x, cudaStream_t stream);
// scratch: 2 · rows · experts floats (the scores and the biased scores).
status launch_route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                    const int32_t* token_ids, int32_t k, bool official, float scale, float* scratch,
                    int32_t* expert_out, float* weight_out, cudaStream_t stream);
status launch_swiglu(const float* g, const float* u, int64_t n, float limit, float* out, cudaStream_t stream);
status launch_moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out,
                          cudaStream_t stream);
// The row moves around grouped MoE (and the compressor's gate + position bias).
status launch_scale_rows(float* x, int64_t rows, int64_t n, const float* w, cudaStream_t stream);
status launch_gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst,
                          cudaStream_t stream);
status launch_scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst,
                           cudaStream_t stream);
status launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream);

// ---- kernels_checksum.cu --------------------------------------------------------------------------
// XXH3-64 (cuda/host/xxh3.h) of one span of `bytes` at `src` → *out (device memory), one thread.
status launch_xxh3(const void* src, int64_t bytes, uint64_t* out, cudaStream_t stream);
// The same over n spans, one block per span: out[i] = XXH3(src[i], bytes[i]) (arrays in device memory).
status launch_xxh3_spans(const uint8_t* const* src, const int64_t* bytes, int64_t n, uint64_t* out,
                         cudaStream_t stream);

}  // namespace tandem::cuda
