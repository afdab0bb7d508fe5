// cuda/host/kernel_paths.h — The K8 kv path and the K10 indexer q path as fused per-row /
// per-head steps, written once for host and device (kernels_attention.cu runs them as one kernel
// each; the host emulation runs them in loops).
//
// Each is exactly the chain of per-op kernels it replaces, in the same order and through the same
// kmath functions (model/attention.cpp project() and compress_all() are the reference): the kv row
// after its linear is RMS-normed with kv_norm, RoPE'd over its last 2·half dims at its position,
// FP8-simulated in official numerics, then rounded through its cache row format (encoded and decoded
// back: what every reader sees); an indexer q head is RoPE'd over its last 2·half dims, then
// Hadamard + FP4-simulated in official numerics. So the fused results are bit-identical to the
// chain's (test_kernel_math.cpp compares them), and one launch replaces five (kv) or two (q).
#pragma once

#include "cuda/host/kernel_codec.h"
#include "cuda/host/kernel_math.h"

namespace tandem::kmath {

// The rest of one kv row after the norm and RoPE: official FP8 simulation over the first `nope`
// dims (bf16 for the rest), then the storage round trip through `bytes` (f.bytes of scratch).
TANDEM_HD void kv_path_finish(float* x, int64_t dim, bool official, int64_t nope, const row_codec& f, uint8_t* bytes) {
    if (official) kv_fp8_sim(x, nope, dim);
    encode_row(f, x, bytes);
    decode_row(f, bytes, x);
}

// K8 for one row, serially: norm, RoPE at pos, then kv_path_finish.
TANDEM_HD void kv_path_row(float* x, int64_t dim, const float* norm_w, float eps, const float* inv_freq, int64_t half,
                           int64_t pos, bool official, int64_t nope, const row_codec& f, uint8_t* bytes) {
    const float inv = rms_inverse(x, dim, eps);
    for (int64_t i = 0; i < dim; ++i) x[i] = rms_apply(x[i], norm_w, i, inv);
    for (int64_t i = 0; i < half; ++i) rope_pair(x + dim - 2 * half, i, inv_freq[i], pos, false);
    kv_path_finish(x, dim, official, nope, f, bytes);
}

// K10 for one head of one token: RoPE at pos over the head's last 2·half dims, then (official) the
// Hadamard rotation + FP4 per 32.
TANDEM_HD void indexer_q_head(float* x, int64_t dim, const float* inv_freq, int64_t half, int64_t pos, bool official) {
    for (int64_t i = 0; i < half; ++i) rope_pair(x + dim - 2 * half, i, inv_freq[i], pos, false);
    if (official) indexer_fp4_sim(x, dim);
}

}  // namespace tandem::kmath
