// cuda/host/cuda_ops.h — Host-buffer entry points of the phase-1 CUDA kernels, and the phase-0
// bring-up (weights + pool on the GPU).
//
// Each op uploads its host inputs, runs its kernel on device 0 (one stream, synchronously) and
// downloads the result. They exist for the parity harness (test/cuda/) and the GPU check; the
// device executor (cuda/device_runtime.cu) launches the very same kernels on device-resident
// buffers through cuda/kernel_launch.h. Every CUDA failure comes back
// as a status naming the op and CUDA's message; a build without CUDA (cuda/ops_none.cpp) or a
// machine without a GPU answers `unavailable`. Shapes are row-major; per-element math is
// cuda/host/kernel_math.h (the kernel list K1–K18 of spec §5.4 names each op).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "cuda/host/device_memory_plan.h"
#include "cuda/host/kernel_views.h"

namespace tandem::cuda {

// K8 / K9 store and the attention read path: rows [n, dims] ↔ stored rows [n, fmt.bytes], the
// bytes cache::codec writes.
status op_encode_rows(const kmath::row_codec& fmt, std::span<const float> values, std::span<uint8_t> rows);
status op_decode_rows(const kmath::row_codec& fmt, std::span<const uint8_t> rows, std::span<float> values);

// K1: h[t, j, :] = embed[ids[t], :] for j < hc (the hc streams start equal).
status op_embed_expand(const kmath::weight_view& embed, std::span<const int32_t> ids, int64_t hc, std::span<float> h);
// K6 / K4 / K5 form: y[r, o] = Σ_k x[r, k] · w(o, k), weights decoded in registers as stored.
status op_linear(std::span<const float> x, int64_t rows, const kmath::weight_view& w, std::span<float> y);
// K3: y = weight ⊙ (x · rsqrt(mean(x²) + eps)) per row of n; weight may be null.
status op_rms_norm(std::span<const float> x, int64_t rows, int64_t n, const float* weight, float eps, std::span<float> y);
// K3/K4 official activation QDQ: FP8 e4m3 blocks of `block` with a power-of-two scale, in place.
status op_qdq_fp8(std::span<float> x, int64_t block, float amax_floor);
// numerics = "official" simulations, per row of `dim` in place: K8 kv (FP8 per 64 over the first
// `nope` dims, bf16 for the rest) or K9/K10 indexer (Hadamard + FP4 per 32; dim a power of two).
enum class official_sim : uint8_t { kv_fp8, indexer_fp4 };
status op_official_sim(official_sim kind, std::span<float> x, int64_t dim, int64_t nope);
// K7/K8/K13 epilogue: rotate the last 2·inv_freq.size() dims of each [rows, heads, dim] head at
// pos[row]; inverse = true undoes it.
status op_rope(std::span<float> x, int64_t rows, int64_t heads, int64_t dim, std::span<const float> inv_freq,
               std::span<const int64_t> pos, bool inverse);
// K2: mHC pre for T tokens: h [T, n, d], fn [(2+n)·n, n·d] fp32, base [(2+n)·n], scale [3] →
// collapsed [T, d], post [T, n], comb [T, n, n].
struct hc_shape {
    int64_t n = 4, d = 0, sinkhorn_iters = 20;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
};
status op_hc_pre(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                 std::span<const float> scale, std::span<float> collapsed, std::span<float> post, std::span<float> comb);
// K17: h_new [T, n, d] from out [T, d], h [T, n, d], post [T, n], comb [T, n, n].
status op_hc_post(int64_t n, int64_t d, std::span<const float> out, std::span<const float> h,
                  std::span<const float> post, std::span<const float> comb, std::span<float> h_new);
// K13 core: per (token t, head h): softmax with sink over keys[t, 0..n_keys[t]) (key rows of
// width dim, shared by all heads, K = V), scale applied to the logits → out [T, H, dim].
status op_attention(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> keys,
                    int64_t max_keys, std::span<const int32_t> n_keys, std::span<const float> sinks, float scale,
                    std::span<float> out);
// K15 routing per token: scores sqrt(softplus(logits [T, E])); selection by tid2eid[token] ([V, k],
// hash layers: pass token_ids) or the top-k of score + bias ([E]); weights renormalised × scale;
// out: experts [T, k] ascending and their weights [T, k]. k ≤ 16.
status op_route(std::span<const float> logits, int64_t tokens, int64_t experts, std::span<const float> bias,
                std::span<const int32_t> tid2eid, std::span<const int32_t> token_ids, int32_t k, bool official,
                float scale, std::span<int32_t> expert_out, std::span<float> weight_out);
// K5 epilogue: out = silu(min(g, limit)) · clamp(u, ±limit), elementwise.
status op_swiglu(std::span<const float> g, std::span<const float> u, float limit, std::span<float> out);
// K16: out [T, d] = Σ_slots contrib [T, slots, d] (ascending slot) + shared [T, d].
status op_moe_combine(std::span<const float> contrib, int64_t tokens, int32_t slots, int64_t d,
                      std::span<const float> shared, std::span<float> out);
// K11: scores [T, max_rows] of each token's visible compressed rows: q [T, heads, dim], w [T, heads],
// keys [T, max_rows, dim] (a token's index-K rows, decoded), n_rows [T]; entries past n_rows[t] are 0.
status op_indexer_scores(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> w,
                         std::span<const float> keys, int64_t max_rows, std::span<const int32_t> n_rows, float idx_scale,
                         float head_scale, std::span<float> scores);
// K9 pooling: out [n, dim] from n closed windows' rings [n, slots, 2·cd] (slots = 2m CSA / m HCA).
status op_compressor_pool(std::span<const float> rings, int64_t n, int64_t m, int64_t dim, bool overlap,
                          std::span<float> out);
// K12: per row t, the k best of scores[t · ld + 0 .. n_cand[t]) in ascending index order into
// sel [T, k] (−1 padded when n_cand[t] < k); tied [T] = 1 where an exact tie straddles the k-th
// boundary (or a NaN is present): then sel holds the lowest-index choice and the CPU's own
// selection decides (kmath::top_k_row).
status op_top_k(std::span<const float> scores, int64_t rows, int64_t ld, std::span<const int32_t> n_cand, int64_t k,
                std::span<int32_t> sel, std::span<int32_t> tied);
// K8 kv path fused (kmath::kv_path_row) over rows [T, dim] in place: RMSNorm with norm_w, RoPE
// at pos[t] with inv_freq, official FP8 over the first `nope` dims, storage round trip through
// fmt; rows [T, fmt.bytes] gets the stored bytes. K10 q path fused (kmath::indexer_q_head) over
// [T, heads, dim] in place.
status op_kv_path(std::span<float> x, int64_t dim, std::span<const float> norm_w, float eps, std::span<const float> inv_freq,
                  std::span<const int64_t> pos, bool official, int64_t nope, const kmath::row_codec& fmt,
                  std::span<uint8_t> rows);
status op_indexer_q_path(std::span<float> x, int64_t heads, int64_t dim, std::span<const float> inv_freq,
                         std::span<const int64_t> pos, bool official);
// K18 HC head collapse: h [T, n, d], fn [n, n·d], base [n], scale [1] → x [T, d] (no Sinkhorn).
status op_hc_head(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                  std::span<const float> scale, std::span<float> x);
// The MoE row moves, rows of `width`: gather dst[i] = src[index[i]]; scatter dst[index[i]] = src[i]
// (dst keeps its other rows); scale x[r] *= w[r].
status op_gather_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst);
status op_scatter_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst);
status op_scale_rows(std::span<float> x, int64_t width, std::span<const float> w);
// out = a + b, elementwise.
status op_add(std::span<const float> a, std::span<const float> b, std::span<float> out);
// K18 greedy: argmax per row of [rows, vocab], ties to the lowest id.
status op_argmax(std::span<const float> logits, int64_t rows, int64_t vocab, std::span<int32_t> ids);

// The ops as a table, so the parity harness can run the same checks on the GPU kernels or on
// their host emulation (cuda/host/ops_emulated.cpp: the kernels' per-element math from
// kernel_math.h in host loops over the same grid). The emulation proves the harness and its
// calibrated bounds in CI; only the device table says anything about the GPU.
struct op_table {
    const char* name;
    decltype(&op_embed_expand) embed_expand;
    decltype(&op_linear) linear;
    decltype(&op_rms_norm) rms_norm;
    decltype(&op_qdq_fp8) qdq_fp8;
    decltype(&op_rope) rope;
    decltype(&op_hc_pre) hc_pre;
    decltype(&op_hc_post) hc_post;
    decltype(&op_attention) attention;
    decltype(&op_argmax) argmax;
    decltype(&op_route) route;
    decltype(&op_swiglu) swiglu;
    decltype(&op_moe_combine) moe_combine;
    decltype(&op_encode_rows) encode_rows;
    decltype(&op_decode_rows) decode_rows;
    decltype(&op_indexer_scores) indexer_scores;
    decltype(&op_compressor_pool) compressor_pool;
    decltype(&op_official_sim) official_sim;
    decltype(&op_top_k) top_k;
    decltype(&op_hc_head) hc_head;
    decltype(&op_gather_rows) gather_rows;
    decltype(&op_scatter_rows) scatter_rows;
    decltype(&op_scale_rows) scale_rows;
    decltype(&op_add) add;
    decltype(&op_kv_path) kv_path;
    decltype(&op_indexer_q_path) indexer_q_path;
};
const op_table& device_ops();
const op_table& emulated_ops();

// Micro-benchmark of the GPU check: device-to-device copy bandwidth (the HBM ceiling) and the
// phase-1 linear kernel's weight bandwidth on a bf16 [out, in] matrix at `batch` rows.
struct bandwidth_result {
    double copy_gb_per_s = 0;
    double linear_gb_per_s = 0;
    double linear_ms = 0;
    std::string gpu;
};
result<bandwidth_result> measure_bandwidth(int64_t out, int64_t in, int64_t batch, int repeats);
// The device-to-device copy bandwidth alone (1 GiB, read + write counted), the roofline's ceiling.
result<double> measure_copy_gb_per_s(int repeats);

// Phase 0: allocate the plan's slabs on device 0 (refusing with check_device_fit's message first
// when they do not fit), upload every tensor as stored, read the weight slab back and compare
// XXH3 checksums, zero the pool, then free everything: a startup fit-and-upload check (cuda_startup.h);
// the device engine then allocates and uploads its own (device_engine.h).
struct bringup_report {
    std::string gpu;
    int64_t free_bytes_before = 0;
    int64_t weight_bytes = 0, pool_bytes = 0, scratch_bytes = 0;
    uint64_t weights_xxh3 = 0;   // of the stored bytes, tensor by tensor in plan order
    bool readback_equal = false; // the device copy hashed to the same value
    double upload_seconds = 0;
};
result<bringup_report> bring_up_device(const device_memory_plan& plan);
// GPU 0's free bytes now (cudaMemGetInfo), for sizing the pool when cache.memory_bytes = 0.
result<int64_t> gpu0_free_bytes();

}  // namespace tandem::cuda
