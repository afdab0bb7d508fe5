// model/compressor.h — (model/ internal) the KV compressors of CSA and HCA layers (and the
// lightning indexer's): each sequence's tokens fill a ring in its pool state, and every m-th
// token closes a window that pools into one compressed row.
//
// Compressor rings (pool state, fp32 rows of [kv | score] with score = gate + ape):
//   HCA (m slots):   slot pos % m holds the current window's tokens.
//   CSA (2m slots):  slots m + pos % m hold the current window; slots 0..m−1 the previous
//                    closed window, whose Ca half (first D') pools into the next row. Initial
//                    score −inf gives those slots weight 0 before the first window closes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/kernels.h"
#include "model/forward.h"
#include "model/numerics.h"

namespace tandem::model {

struct compressor_shape {
    int64_t m = 0;        // compress rate
    int64_t dim = 0;      // D' (row width)
    bool overlap = false; // CSA: two series, 2m-slot windows
    bool indexer = false; // the indexer's compressor (FP4 simulation instead of FP8)
};

// Pools one closed window of the ring into out[dim] (softmax over slots, per feature).
void pool_window(const compressor_shape& s, const float* ring, float* out);

// Feeds one sequence's new tokens (kv and gate rows of (overlap ? 2 : 1) · dim) through its ring;
// each window they close pools into a row — normed, RoPE'd at the window's first position, FP8 /
// FP4-simulated in official numerics — handed to emit(window index, row). A template, not a
// std::function: the caller's capturing lambda would allocate on every decode step.
template <typename Emit>
void run_compressor(const model_config& c, const compressor_shape& s, const compressor_weights& cw,
                    const rope_table& rope, const float* kv, const float* gate, int64_t n_tokens, int64_t start_pos,
                    float* ring, bool official, Emit&& emit) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D, F = 2 * cd, R = c.rope_head_dim;
    thread_local std::vector<float> pooled, row;
    pooled.resize(static_cast<size_t>(D));
    row.resize(static_cast<size_t>(D));
    for (int64_t i = 0; i < n_tokens; ++i) {
        const int64_t pos = start_pos + i, slot = pos % m;
        float* dst = ring + ((s.overlap ? m : 0) + slot) * F;
        std::copy_n(kv + i * cd, cd, dst);
        for (int64_t e = 0; e < cd; ++e) dst[cd + e] = gate[i * cd + e] + cw.ape.ptr()[slot * cd + e];
        if (slot != m - 1) continue;
        pool_window(s, ring, pooled.data());
        cpu::rms_norm(pooled.data(), cw.norm.ptr(), D, c.rms_norm_eps, row.data());
        rope.apply(&row[static_cast<size_t>(D - R)], pos + 1 - m, false);
        if (official && s.indexer) indexer_fp4_sim(row.data(), D);
        else if (official) kv_fp8_sim(row.data(), D - R, D);
        emit(pos / m, row.data());
        if (s.overlap) std::copy_n(ring + m * F, m * F, ring);  // this window becomes "previous"
    }
}

}  // namespace tandem::model
