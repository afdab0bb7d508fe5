// cpu/kernels_scalar.cpp — the portable reference kernels (the order every ISA reproduces).
#include <cmath>
#include <vector>

#include "core/exp_f32.h"
#include "cpu/kernels_internal.h"

namespace tandem::cpu::detail {

namespace {

float dot_reference(const float* a, const float* b, int64_t n) {
    float acc[8] = {};
    const int64_t n8 = n & ~int64_t{7};
    for (int64_t k = 0; k < n8; k += 8)
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
    for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; ++l) acc[l] += acc[l + 2];
    float s = acc[0] + acc[1];
    for (int64_t k = n8; k < n; ++k) s = std::fma(a[k], b[k], s);
    return s;
}

void dots_reference(const float* q, const float* const* keys, int64_t count, int64_t n, float* out) {
    for (int64_t j = 0; j < count; ++j) out[j] = dot_reference(q, keys[j], n);
}

void dots_heads_reference(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count,
                          int64_t n, float* out, int64_t out_stride) {
    for (int64_t h = 0; h < heads; ++h) dots_reference(q + h * q_stride, keys, count, n, out + h * out_stride);
}

void axpy_reference(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const volatile float p = a * x[i];  // volatile: never contracted into an fma
        y[i] = y[i] + p;
    }
}

void axpys_reference(const float* a, const float* const* x, int64_t count, float* y, int64_t n) {
    for (int64_t j = 0; j < count; ++j) axpy_reference(a[j], x[j], y, n);
}

float exp_shifted_reference(float* v, int64_t n, float shift) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += (v[j] = exp_f32(v[j] - shift));
    return sum;
}

void swiglu_reference(const float* g, const float* u, int64_t n, float limit, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float gc = limit < g[i] ? limit : g[i];                                // std::min(g, limit)
        const float uc = u[i] < -limit ? -limit : (limit < u[i] ? limit : u[i]);  // std::clamp(u, −limit, limit)
        out[i] = gc / (1.0f + exp_f32(-gc)) * uc;
    }
}

void scale_rows_reference(const float* x, const float* w, float r, int64_t n, float* y) {
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r;
    }
}

void tile_reference(const float* x, int64_t x_stride, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                    float* y, int64_t y_stride) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t o = o0; o < o1; ++o) {
        w.decode_row(o, row.data());  // exact values: the same numbers the SIMD paths form in registers
        for (int64_t r = 0; r < rows; ++r) y[r * y_stride + (o - o0)] = dot_reference(x + r * x_stride, row.data(), w.cols);
    }
}

}  // namespace

const kernel_table& scalar_kernels() {
    static const kernel_table t{"scalar",       tile_reference,        dot_reference,    dots_reference,
                                dots_heads_reference, axpy_reference, axpys_reference, exp_shifted_reference,
                                swiglu_reference,     scale_rows_reference};
    return t;
}

}  // namespace tandem::cpu::detail
