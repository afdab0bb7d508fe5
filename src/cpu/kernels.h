// cpu/kernels.h — Batch-invariant kernels of the CPU backend.
//
// Owns: dot products, linear layers over weights in their stored form (cpu/weight_matrix.h:
// fp32, bf16, f16, FP8 e4m3 + block scales, FP4 e2m1 + per-32 scales, decoded in registers) and
// row-wise RMSNorm. Every output element is reduced in one fixed order (kernels_internal.h: 8
// fma lanes, pairwise lane sum, fma tail) whatever the batch, the element's position in it, the
// register block, the tile, the thread count or the instruction set; parallelism is only over
// independent outputs, never inside one reduction. That is what makes batched and chunked runs
// bitwise equal to single-sequence runs (design invariant 8).
//
// The instruction set is chosen once per process (AVX2 + FMA when the CPU has it, else the
// portable reference) through plain function pointers — no ifunc, so ThreadSanitizer works.
#pragma once

#include <cstdint>
#include <span>

#include "cpu/thread_pool.h"
#include "cpu/weight_matrix.h"

namespace tandem::cpu {

// Σ a[i]·b[i] in the fixed order described above.
float dot(const float* a, const float* b, int64_t n);

// out[j] = dot(q, keys[j], n) for j < count (attention scores: one query against its keys).
void dots(const float* q, const float* const* keys, int64_t count, int64_t n, float* out);

// out[h·out_stride + j] = dot(q + h·q_stride, keys[j], n) for h < heads, j < count: every head of
// a row against the keys they share, each score bitwise what dots() gives that head alone (the
// AVX-512 kernels score two heads per register).
void dots_heads(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count, int64_t n,
                float* out, int64_t out_stride);

// y[i] += a · x[i], the product and the sum each rounded (never an fma), so every ISA and the
// plain C++ loop it replaces give the same bits.
void axpy(float a, const float* x, float* y, int64_t n);

// axpy(a[j], x[j], y, n) for j = 0, 1, …, count − 1, in that order, so bitwise the same sums;
// y stays in registers across the j loop instead of being loaded and stored once per j (the
// attention core's weighted sum of values: one store per element instead of one per key).
void axpys(const float* a, const float* const* x, int64_t count, float* y, int64_t n);

// The softmax's exponentials: v[j] = exp_f32(v[j] − shift) for j < n (core/exp_f32.h, an fma
// sequence every ISA and the GPU reproduce bit for bit), returning their sum in ascending j from 0.
float exp_shifted(float* v, int64_t n, float shift);

// The MoE's gate: out[i] = silu(min(g[i], limit)) · clamp(u[i], −limit, limit) with silu(x) =
// x / (1 + exp_f32(−x)) — the same bits on every ISA and on the GPU (cuda/host/kernel_math.h).
void swiglu(const float* g, const float* u, int64_t n, float limit, float* out);

// y[r, o] = Σ_i x[r, i] · w(o, i) for r < rows, o < w.rows (PyTorch nn.Linear layout: w is
// [out, in]). x has `rows` rows of stride `x_stride` (≥ w.cols), y rows of stride `y_stride`.
void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const weight_matrix& w, float* y,
            int64_t y_stride);

// One linear of a group: y[r, o] = Σ_i x[r, i] · w(o, i) for r < rows, o < w.rows, strides as above.
struct linear_job {
    const float* x = nullptr;
    int64_t rows = 0, x_stride = 0;
    weight_matrix w;
    float* y = nullptr;
    int64_t y_stride = 0;
};

// Every job of the group in ONE parallel pass over all their (output block, row tile) units,
// each job's result bitwise what linear() gives it alone. Why: a decode step's MoE runs many
// small linears (one per active expert and projection, a few rows each); a pass per linear
// paid a fork/join and left threads idle on the tail of every small one. Allocates nothing
// once the group size has been seen.
void linear_group(thread_pool& pool, std::span<const linear_job> jobs);

// fp32 weights: the same as linear(weight_matrix::from_f32(w, out, in)).
void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const float* w, int64_t in,
            int64_t out, float* y, int64_t y_stride);

// Mean of squares in fixed order, used by every RMSNorm.
float mean_square(const float* x, int64_t n);

// y = w ⊙ (x · rsqrt(mean(x²) + eps)); w may be null (unweighted). y may alias x.
void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y);

// Which kernels this process runs ("avx2+fma" or "scalar"); TANDEM_CPU_KERNELS=scalar forces
// the portable ones (tests compare the two).
const char* kernel_isa();

}  // namespace tandem::cpu
