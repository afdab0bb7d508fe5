// cpu/kernels_internal.h — (cpu/ internal) the per-ISA kernel table behind kernels.h.
//
// Every implementation computes each output element in ONE order, the reference order of
// kernels_scalar.cpp: eight lane accumulators, lane l summing fma(x[k], w[k], ·) over k ≡ l (mod 8)
// in ascending k for k below the last multiple of 8, then (l, l+4), (l, l+2), (0, 1) pairwise
// sums, then fma over the remaining tail in ascending k. So every ISA, register block, batch size,
// tile and thread count gives the same bits (design invariant 8), and a scalar machine agrees
// with an AVX2 one.
//
// The table is chosen once (plain function pointers, no ifunc resolvers: target_clones'
// resolvers crash under ThreadSanitizer).
#pragma once

#include <cstdint>

#include "cpu/weight_matrix.h"

namespace tandem::cpu::detail {

struct kernel_table {
    const char* name;
    // y[r·y_stride + (o − o0)] = Σ_k x[r·x_stride + k] · w(o, k) for r < rows, o0 ≤ o < o1.
    void (*tile)(const float* x, int64_t x_stride, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                 float* y, int64_t y_stride);
    float (*dot)(const float* a, const float* b, int64_t n);
    // out[j] = dot(q, keys[j], n) for j < count, each in the dot order above.
    void (*dots)(const float* q, const float* const* keys, int64_t count, int64_t n, float* out);
    // out[h·out_stride + j] = dot(q + h·q_stride, keys[j], n) for h < heads, j < count: dots for
    // several queries (heads) against the same keys, each score in the dot order above.
    void (*dots_heads)(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count,
                       int64_t n, float* out, int64_t out_stride);
    // y[i] = y[i] + a·x[i]: a rounded product, then a rounded sum (no fma), per element.
    void (*axpy)(float a, const float* x, float* y, int64_t n);
    // axpy(a[j], x[j], y, n) for j = 0, 1, …, count − 1 in that order: the same bits.
    void (*axpys)(const float* a, const float* const* x, int64_t count, float* y, int64_t n);
    // v[j] = exp_f32(v[j] − shift) for j < n (core/exp_f32.h: the same bits on every ISA), and
    // returns ((0 + v[0]) + v[1]) + … in ascending j.
    float (*exp_shifted)(float* v, int64_t n, float shift);
    // out[i] = silu(min(g[i], limit)) · clamp(u[i], −limit, limit), silu(x) = x / (1 + exp_f32(−x))
    // (std::min / std::clamp semantics for NaN: the operand passes through).
    void (*swiglu)(const float* g, const float* u, int64_t n, float limit, float* out);
    // y[i] = w[i] · (x[i] · r), or x[i] · r where w is null: RMSNorm's scaling, two rounded
    // multiplies per element. y may alias x.
    void (*scale_rows)(const float* x, const float* w, float r, int64_t n, float* y);
};

// Outputs per work unit of linear() / linear_group(): about 96 KB of weights, a multiple of 48
// (every tile's output group divides it) from 48 to 384 (kernels.cpp explains why).
int64_t output_block(const weight_matrix& w);

const kernel_table& scalar_kernels();
const kernel_table* avx2_kernels();  // null when this build has no AVX2 path
const kernel_table* avx512_kernels();  // AVX2's with an AVX-512F tile; null without the AVX2 path
const kernel_table& active_kernels();

// How the AVX-512 few-row kernel decodes the FP8 codes whose scale it folds into x
// (cpu/pair_decoders_avx512.h, fp8_unscaled16): via_fp32 forms fp32 subnormals from the e4m3
// subnormal codes, so it is taken only where multiplying them costs nothing (AMD cores; an Intel
// core takes a microcode assist per multiply). Both give the same bits.
enum class fp8_decode_route { via_fp16, via_fp32 };
fp8_decode_route fp8_route_for_this_cpu();

// One to eight rows against FP4 or FP8 weights with AVX-512F (few_rows_avx512.cpp): the tile's
// contract below for rows ≤ 8, bitwise the AVX2 kernels, whichever FP8 route. Only the AVX-512
// table calls it (x86-64 builds only).
void few_rows_avx512(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                     float* y, int64_t ys, fp8_decode_route route);

// The dots_heads contract above with AVX-512F, two heads per register (dots_avx512.cpp). Only the
// AVX-512 table calls it (x86-64 builds only).
void dots_heads_avx512(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count,
                       int64_t n, float* out, int64_t out_stride);

// The axpys, exp_shifted, swiglu and scale_rows contracts above with AVX-512F, sixteen elements
// per register (axpys_avx512.cpp, elementwise_avx512.cpp). Only the AVX-512 table calls them
// (x86-64 builds only).
void axpys_avx512(const float* a, const float* const* x, int64_t count, float* y, int64_t n);
float exp_shifted_avx512(float* v, int64_t n, float shift);
void swiglu_avx512(const float* g, const float* u, int64_t n, float limit, float* out);
void scale_rows_avx512(const float* x, const float* w, float r, int64_t n, float* y);

// Two or more rows against any stored form with AVX-512F (gemm_avx512.cpp): the tile's contract
// above, bitwise the AVX2 tile. Only the AVX-512 table calls it (x86-64 builds only).
void gemm_avx512(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1, float* y,
                 int64_t ys);

// gemm_avx512's FMA loop alone, for bench_kernels' GEMM ceiling: the kernel's own 3-row blocks of a
// 60-row tile (rows K = 1024 apart) over one 512-column chunk of a group's decoded runs in the L1
// scratch, `repeats` times — without the weight decode, the reductions, or the weights' trip from
// memory. Returns the FLOPs done (x86-64 builds only; needs the AVX-512 table).
double gemm_fma_loop_avx512(int64_t repeats);

}  // namespace tandem::cpu::detail
