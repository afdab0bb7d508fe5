// cpu/kernels.cpp — see kernels.h: dispatch, tiling and threading around the per-ISA tiles.
#include "cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpu/kernels_internal.h"

namespace tandem::cpu {

namespace detail {

const kernel_table& active_kernels() {
    static const kernel_table& table = [] () -> const kernel_table& {
        const char* force = std::getenv("TANDEM_CPU_KERNELS");
        if (force && std::strcmp(force, "scalar") == 0) return scalar_kernels();
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        if (avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c"))
            return *avx2_kernels();
#endif
        return scalar_kernels();
    }();
    return table;
}

}  // namespace detail

const char* kernel_isa() { return detail::active_kernels().name; }

float dot(const float* a, const float* b, int64_t n) { return detail::active_kernels().dot(a, b, n); }

void dots(const float* q, const float* const* keys, int64_t count, int64_t n, float* out) {
    detail::active_kernels().dots(q, keys, count, n, out);
}

void axpy(float a, const float* x, float* y, int64_t n) { detail::active_kernels().axpy(a, x, y, n); }

void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const weight_matrix& w, float* y,
            int64_t y_stride) {
    if (rows <= 0 || w.rows <= 0) return;
    const auto tile = detail::active_kernels().tile;
    // Work unit: a block of output columns over a tile of rows. The block's weights (a few KB
    // to a few hundred KB) stay in cache while the tile's rows stream past them, and each
    // weight is read from memory once per call whatever the batch (rows are tiled only when
    // there are many, and then the block is re-read from cache, not memory).
    const int64_t row_bytes = std::max<int64_t>(1, w.row_bytes());
    const int64_t block = std::clamp<int64_t>((int64_t{96} << 10) / row_bytes / 12 * 12, 12, 384);
    const int64_t row_tile = 63;  // a multiple of the AVX2 kernel's 3-row group
    const int64_t blocks = (w.rows + block - 1) / block, tiles = (rows + row_tile - 1) / row_tile;
    const int64_t units = blocks * tiles;
    pool.parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
            const int64_t b = u / tiles, t = u % tiles;
            const int64_t o0 = b * block, o1 = std::min(w.rows, o0 + block);
            const int64_t r0 = t * row_tile, r1 = std::min(rows, r0 + row_tile);
            tile(x + r0 * x_stride, x_stride, r1 - r0, w, o0, o1, y + r0 * y_stride + o0, y_stride);
        }
    });
}

void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const float* w, int64_t in,
            int64_t out, float* y, int64_t y_stride) {
    linear(pool, x, rows, x_stride, weight_matrix::from_f32(w, out, in), y, y_stride);
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
