// cpu/kernels.h — Batch-invariant fp32 kernels of the CPU backend.
//
// Owns: dot products, row-wise linear layers and row-wise RMSNorm in fp32. Every reduction runs
// in one fixed order per output element (16 interleaved partial sums, combined pairwise, then
// the tail), independent of how many rows are in the batch, of the row's position in it and of
// the thread count. Parallelism is only ever over independent outputs (rows, columns, heads),
// never inside one reduction — that is what makes batched and chunked runs bitwise equal to
// single-sequence runs (design invariant 8).
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace tandem::cpu {

// Σ a[i]·b[i] in the fixed order described above.
float dot(const float* a, const float* b, int64_t n);

// y[r, o] = Σ_i x[r, i] · w[o, i]  (PyTorch nn.Linear layout: w is [out, in], row-major).
// x has `rows` rows of stride `x_stride`, y rows of stride `y_stride`.
void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const float* w,
            int64_t in, int64_t out, float* y, int64_t y_stride);

// Mean of squares in fixed order, used by every RMSNorm.
float mean_square(const float* x, int64_t n);

// y = w ⊙ (x · rsqrt(mean(x²) + eps)); w may be null (unweighted). y may alias x.
void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y);

}  // namespace tandem::cpu
