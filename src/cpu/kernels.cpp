// cpu/kernels.cpp — see kernels.h.
#include "cpu/kernels.h"

#include <cmath>

namespace tandem::cpu {

namespace {
constexpr int k_lanes = 16;

// 2 rows × 4 outputs with exactly dot()'s per-element operation order (16 lane accumulators,
// pairwise lane reduction, sequential tail), so y[r][o] is bitwise the same as dot(x_r, w_o)
// whichever path computed it. Weight rows are loaded once per two input rows.
// Built for AVX2 and baseline; AVX2 has no FMA here, so both clones round identically.
__attribute__((target_clones("avx2", "default")))
void dot_2x4(const float* x0, const float* x1, const float* w0, const float* w1, const float* w2,
             const float* w3, int64_t n, float* y0, float* y1) {
    const float* w[4] = {w0, w1, w2, w3};
    float acc[2][4][k_lanes] = {};
    int64_t i = 0;
    for (; i + k_lanes <= n; i += k_lanes)
        for (int o = 0; o < 4; ++o)
            for (int l = 0; l < k_lanes; ++l) {
                acc[0][o][l] += x0[i + l] * w[o][i + l];
                acc[1][o][l] += x1[i + l] * w[o][i + l];
            }
    for (int r = 0; r < 2; ++r) {
        const float* x = r == 0 ? x0 : x1;
        float* y = r == 0 ? y0 : y1;
        for (int o = 0; o < 4; ++o) {
            float* a = acc[r][o];
            for (int width = k_lanes / 2; width > 0; width /= 2)
                for (int l = 0; l < width; ++l) a[l] += a[l + width];
            float s = a[0];
            for (int64_t j = i; j < n; ++j) s += x[j] * w[o][j];
            y[o] = s;
        }
    }
}
}  // namespace

__attribute__((target_clones("avx2", "default")))
float dot(const float* a, const float* b, int64_t n) {
    // Lane-wise accumulation vectorizes without reassociation flags and keeps one fixed order.
    float acc[k_lanes] = {};
    int64_t i = 0;
    for (; i + k_lanes <= n; i += k_lanes)
        for (int l = 0; l < k_lanes; ++l) acc[l] += a[i + l] * b[i + l];
    for (int width = k_lanes / 2; width > 0; width /= 2)
        for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
    float s = acc[0];
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const float* w,
            int64_t in, int64_t out, float* y, int64_t y_stride) {
    // Parallel over blocks of output columns: each block of weight rows is read once per call and
    // reused by every input row while it is hot in cache.
    constexpr int64_t k_block = 8;
    int64_t blocks = (out + k_block - 1) / k_block;
    int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, in * rows));
    pool.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
        float t0[4], t1[4];
        for (int64_t b = b0; b < b1; ++b) {
            int64_t o0 = b * k_block, o1 = std::min(out, o0 + k_block);
            int64_t r = 0;
            for (; r + 2 <= rows; r += 2) {
                const float* xa = x + r * x_stride;
                const float* xb = xa + x_stride;
                int64_t o = o0;
                for (; o + 4 <= o1; o += 4) {
                    dot_2x4(xa, xb, w + o * in, w + (o + 1) * in, w + (o + 2) * in, w + (o + 3) * in, in, t0, t1);
                    for (int k = 0; k < 4; ++k) y[r * y_stride + o + k] = t0[k], y[(r + 1) * y_stride + o + k] = t1[k];
                }
                for (; o < o1; ++o) {
                    y[r * y_stride + o] = dot(xa, w + o * in, in);
                    y[(r + 1) * y_stride + o] = dot(xb, w + o * in, in);
                }
            }
            for (; r < rows; ++r)
                for (int64_t o = o0; o < o1; ++o) y[r * y_stride + o] = dot(x + r * x_stride, w + o * in, in);
        }
    });
}

float mean_square(const float* x, int64_t n) {
    return dot(x, x, n) / static_cast<float>(n);
}

void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y) {
    float r = 1.0f / std::sqrt(mean_square(x, n) + static_cast<float>(eps));
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r;
    }
}

}  // namespace tandem::cpu
