// model/numerics.cpp — see numerics.h. Element rounding comes from cache/codec.h, the single
// definition of the e4m3 / e2m1 grids and of the power-of-two block scale.
#include "model/numerics.h"

#include <algorithm>
#include <cmath>

#include "cache/codec.h"

namespace tandem::model {

namespace {

namespace codec = tandem::cache::codec;

constexpr float k_e4m3_max = 448.0f;
constexpr float k_e2m1_max = 6.0f;

template <typename Round>
void qdq_blocks(float* x, int64_t n, int64_t block, float floor, float max_code, Round round) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int64_t b1 = std::min(n, b0 + block);
        float amax = 0.0f;
        for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = codec::pow2_block_scale(amax, floor, max_code);
        for (int64_t i = b0; i < b1; ++i) x[i] = round(std::clamp(x[i] / s, -max_code, max_code)) * s;
    }
}

float round_e4m3(float v) { return codec::e4m3_to_float(codec::float_to_e4m3(v)); }
float round_e2m1(float v) { return codec::e2m1_to_float(codec::float_to_e2m1(v)); }

}  // namespace

void act_quant_fp8(float* x, int64_t n) { qdq_blocks(x, n, 128, 1e-4f, k_e4m3_max, round_e4m3); }

void kv_fp8_sim(float* x, int64_t n_nope, int64_t n_total) {
    qdq_blocks(x, n_nope, 64, 1e-4f, k_e4m3_max, round_e4m3);
    for (int64_t i = n_nope; i < n_total; ++i) x[i] = codec::bf16_to_float(codec::float_to_bf16(x[i]));
}

void hadamard_transform(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void indexer_fp4_sim(float* x, int64_t n) {
    hadamard_transform(x, n);
    qdq_blocks(x, n, 32, 6.0f * std::ldexp(1.0f, -126), k_e2m1_max, round_e2m1);
}

}  // namespace tandem::model
