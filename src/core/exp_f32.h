// core/exp_f32.h — e^x in fp32 from an explicit operation sequence, the same bits on every side
// that runs it: the CPU's scalar reference, its AVX2 loop (cpu/kernels_avx2.cpp, exp_shifted),
// the CUDA kernels and their host emulation (cuda/host/kernel_math.h includes this file).
//
// Why not std::exp / expf: glibc's expf is a scalar call (~20 cycles, the largest single cost of
// the CPU attention softmax after the dots and the weighted sum), its SIMD forms are not bitwise
// glibc's, and the GPU's expf differs from both in the last bits — so CPU and GPU softmaxes could
// only agree within a tolerance. This one is an IEEE fma chain that a vector unit and a GPU
// reproduce exactly.
//
// Method: x = n·ln2 + r with n = round-to-nearest-even(x · log2 e) and r = x − n·ln2 in two fma
// steps (ln2 split into a high part with trailing zero bits and a low part), |r| ≤ ~0.347; e^r by
// its Taylor series to r^7 in Horner form with fma (the r^8/8! term left out is 5e-9 relative,
// below half an ulp); then 2^n applied as two exact powers of two, 2^⌊n/2⌋ · 2^(n−⌊n/2⌋), so results
// that are fp32 subnormals are rounded once, at the second multiply. Accuracy: within 1 ulp of
// e^x over the whole range (unit-tested against exp in double). x is first clamped to
// [−104, 89]: below, e^x rounds to +0 (e^-104 < 2^-150); above, the result overflows to +inf as
// e^x does. NaN stays NaN (the clamps compare, and a NaN compares false).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TANDEM_EXP_HD __host__ __device__ __forceinline__
#else
#define TANDEM_EXP_HD inline
#endif

namespace tandem {

// The fp32 with these bits (also cuda/host/kernel_math.h's as_float).
TANDEM_EXP_HD float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

namespace exp_f32_detail {

inline constexpr float k_lowest = -104.0f;
inline constexpr float k_highest = 89.0f;
inline constexpr float k_log2e = 1.44269502163f;       // log2(e) rounded to fp32
inline constexpr float k_ln2_hi = 0.693145751953125f;  // ln 2 to 16 bits: n · k_ln2_hi is exact for |n| < 2^8
inline constexpr float k_ln2_lo = 1.42860676533e-06f;  // ln 2 − k_ln2_hi
// 1/k! for k = 7 down to 2 (fp32-rounded); k = 1 and 0 are 1.
inline constexpr float k_c7 = 1.98412701e-04f;
inline constexpr float k_c6 = 1.38888892e-03f;
inline constexpr float k_c5 = 8.33333377e-03f;
inline constexpr float k_c4 = 4.16666679e-02f;
inline constexpr float k_c3 = 1.66666672e-01f;
inline constexpr float k_c2 = 0.5f;

TANDEM_EXP_HD float pow2_of(int32_t e) { return float_from_bits(static_cast<uint32_t>(e + 127) << 23); }  // −126 ≤ e ≤ 127

}  // namespace exp_f32_detail

TANDEM_EXP_HD float exp_f32(float x) {
    using namespace exp_f32_detail;
    x = x < k_lowest ? k_lowest : x;
    x = x > k_highest ? k_highest : x;
    const float n = rintf(x * k_log2e);
    float r = fmaf(-n, k_ln2_hi, x);
    r = fmaf(-n, k_ln2_lo, r);
    float p = k_c7;
    p = fmaf(p, r, k_c6);
    p = fmaf(p, r, k_c5);
    p = fmaf(p, r, k_c4);
    p = fmaf(p, r, k_c3);
    p = fmaf(p, r, k_c2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    // NaN: n is NaN, and so is p; the conversion's value does not matter then.
    const int32_t ni = n != n ? 0 : static_cast<int32_t>(n);
    const int32_t half = ni >> 1;  // floor(n / 2): −76 ≤ half, ni − half ≤ 65
    return (p * pow2_of(half)) * pow2_of(ni - half);
}

}  // namespace tandem
