// test/cuda/moe_reference.h — model/moe.cpp's routing and combine helpers restated line for line
// for the CUDA tests: moe.cpp keeps them file-local (the model's MoE output itself is covered end
// to end by test/unit/model's golden tests). If moe.cpp changes its order, change it here too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/exp_f32.h"

namespace moe_cpu {
inline float sqrt_softplus(float x) { return std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x))); }
inline float silu(float x) { return x / (1.0f + tandem::exp_f32(-x)); }
inline float swiglu(float g, float u, float limit) { return silu(std::min(g, limit)) * std::clamp(u, -limit, limit); }
inline std::vector<int32_t> top_k(const std::vector<float>& v, int64_t k) {
    std::vector<int32_t> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    idx.resize(static_cast<size_t>(k));
    return idx;
}
}  // namespace moe_cpu
