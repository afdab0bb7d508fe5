// cpu/kernels.cpp — see kernels.h.
#include "cpu/kernels.h"

#include <cmath>

namespace tandem::cpu {

namespace {
constexpr int k_lanes = 16;
}

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
        for (int64_t b = b0; b < b1; ++b) {
            int64_t o0 = b * k_block, o1 = std::min(out, o0 + k_block);
            for (int64_t r = 0; r < rows; ++r) {
                const float* xr = x + r * x_stride;
                float* yr = y + r * y_stride;
                for (int64_t o = o0; o < o1; ++o) yr[o] = dot(xr, w + o * in, in);
            }
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
