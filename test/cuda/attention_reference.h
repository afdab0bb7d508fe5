// test/cuda/attention_reference.h — model/attention.cpp's indexer score, compressor ring update and
// attention loops restated line for line for the CUDA tests (attention.cpp keeps them inside its
// attention_pass / file-local functions; the model's attention output itself is covered end to end
// by test/unit/model's golden tests). If attention.cpp changes its order, change it here too. The
// window pooling (model/compressor.h) and the top-k (model/top_k.h) are public and called as they are.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "core/exp_f32.h"
#include "cpu/kernels.h"
#include "model/compressor.h"
#include "model/top_k.h"

namespace attention_cpu {

// select_rows: one compressed row's score for one token.
inline float indexer_score(const float* qi, const float* key, int64_t heads, int64_t dim, const float* iw,
                           float idx_scale, float head_scale) {
    float sc = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
        const float dp = tandem::cpu::dot(qi + h * dim, key, dim);
        sc += (std::max(dp, 0.0f) * idx_scale) * (iw[h] * head_scale);
    }
    return sc;
}

// pool_window: the model's own (model/compressor.h), not a restatement.
inline void pool_window(int64_t m, int64_t D, bool overlap, const float* ring, float* out) {
    tandem::model::pool_window(tandem::model::compressor_shape{m, D, overlap, false}, ring, out);
}

// top_k_ascending: the model's own (model/top_k.h), not a restatement.
inline void top_k_ascending(const std::vector<float>& v, int64_t k, std::vector<int32_t>& idx) {
    tandem::model::top_k_ascending(v, k, idx);
}

// run_compressor's ring update for one sequence (before the norm / RoPE / simulation of each
// emitted row): pooled rows go to pooled [emitted, D] in order.
inline void feed_ring(int64_t m, int64_t D, bool overlap, const float* kv, const float* gate, const float* ape,
                      int64_t n_tokens, int64_t start_pos, float* ring, std::vector<float>& pooled) {
    const int64_t cd = (overlap ? 2 : 1) * D, F = 2 * cd;
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t i = 0; i < n_tokens; ++i) {
        const int64_t pos = start_pos + i, slot = pos % m;
        float* dst = ring + ((overlap ? m : 0) + slot) * F;
        std::copy_n(kv + i * cd, cd, dst);
        for (int64_t e = 0; e < cd; ++e) dst[cd + e] = gate[i * cd + e] + ape[slot * cd + e];
        if (slot != m - 1) continue;
        pool_window(m, D, overlap, ring, row.data());
        pooled.insert(pooled.end(), row.begin(), row.end());
        if (overlap) std::copy_n(ring + m * F, m * F, ring);
    }
}

// attend, one (token, head), before the inverse RoPE.
inline void attend(const float* qh, const std::vector<const float*>& keys, int64_t D, float scale, float sink, float* oh) {
    std::vector<float> logit(keys.size());
    tandem::cpu::dots(qh, keys.data(), static_cast<int64_t>(keys.size()), D, logit.data());
    float mx = sink;
    for (size_t j = 0; j < keys.size(); ++j) mx = std::max(mx, logit[j] = logit[j] * scale);
    float denom = 0.0f;
    for (size_t j = 0; j < keys.size(); ++j) denom += (logit[j] = tandem::exp_f32(logit[j] - mx));
    denom += tandem::exp_f32(sink - mx);
    for (int64_t e = 0; e < D; ++e) oh[e] = 0.0f;
    for (size_t j = 0; j < keys.size(); ++j) tandem::cpu::axpy(logit[j] / denom, keys[j], oh, D);
}

}  // namespace attention_cpu
