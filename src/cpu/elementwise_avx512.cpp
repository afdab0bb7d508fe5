// cpu/elementwise_avx512.cpp — the AVX-512 table's per-element kernels: softmax's exponential,
// SwiGLU and RMSNorm's scaling, sixteen elements per register.
//
// Why: on a core with two 512-bit FMA pipes (a Xeon 6 VM here) a zmm operation does twice a ymm
// one's work; together these were ~4.5% of a 512-token prefill of `small` there. Each element
// goes through exactly the operations of the AVX2 forms (kernels_avx2.cpp) and of the scalar
// reference, in the same order, so the register width changes no bit: compares and masked moves
// where AVX2 blends, the same round-to-nearest-even, fma chain and powers of two.
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include "core/exp_f32.h"
#include "cpu/pair_decoders_avx512.h"  // for TANDEM_AVX512

namespace tandem::cpu::detail {

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be
// used uninitialized (GCC bug 105593, fixed in 13; see tile_avx512.cpp): silenced for this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// exp_f32 on sixteen lanes (see exp8 in kernels_avx2.cpp): a NaN lane compares false in both
// clamps and stays NaN; its exponent is taken as 0, as in the scalar form.
TANDEM_AVX512_INLINE __m512 exp16(__m512 x) {
    using namespace exp_f32_detail;
    const __m512 lowest = _mm512_set1_ps(k_lowest), highest = _mm512_set1_ps(k_highest);
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, lowest, _CMP_LT_OQ), lowest);
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, highest, _CMP_GT_OQ), highest);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(k_log2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_lo), r);
    __m512 p = _mm512_set1_ps(k_c7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_c6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_c5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_c4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_c3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_c2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(n, n, _CMP_ORD_Q), n);
    const __m512i half = _mm512_srai_epi32(ni, 1), rest = _mm512_sub_epi32(ni, half);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(rest, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

// Lanes 0 .. n − 1 of sixteen (n ≤ 16): the mask of the last register's loads (zeros, never a
// fault, in the other lanes) and of its store.
TANDEM_AVX512_INLINE __mmask16 lanes_below(int64_t n) {
    return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u);
}

// swiglu_reference on sixteen lanes (see swiglu8): the same min / max operand order, so a NaN g
// or u passes through; the same divide and multiply.
TANDEM_AVX512_INLINE __m512 swiglu16(__m512 g, __m512 u, __m512 limit) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 gc = _mm512_min_ps(limit, g);
    const __m512 uc = _mm512_min_ps(limit, _mm512_max_ps(_mm512_castsi512_ps(_mm512_xor_si512(
                                                             _mm512_castps_si512(limit), _mm512_castps_si512(sign))),
                                                         u));
    const __m512 neg_gc = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gc), _mm512_castps_si512(sign)));
    const __m512 silu = _mm512_div_ps(gc, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(neg_gc)));
    return _mm512_mul_ps(silu, uc);
}

}  // namespace

TANDEM_AVX512 float exp_shifted_avx512(float* v, int64_t n, float shift) {
    const __m512 sv = _mm512_set1_ps(shift);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(v + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(v + j), sv)));
    if (j < n) {
        const __mmask16 live = lanes_below(n - j);
        _mm512_mask_storeu_ps(v + j, live, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, v + j), sv)));
    }
    float sum = 0.0f;  // ascending, as the reference
    for (int64_t i = 0; i < n; ++i) sum += v[i];
    return sum;
}

TANDEM_AVX512 void swiglu_avx512(const float* g, const float* u, int64_t n, float limit, float* out) {
    const __m512 lv = _mm512_set1_ps(limit);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, swiglu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i), lv));
    if (i < n) {
        const __mmask16 live = lanes_below(n - i);
        _mm512_mask_storeu_ps(out + i, live,
                              swiglu16(_mm512_maskz_loadu_ps(live, g + i), _mm512_maskz_loadu_ps(live, u + i), lv));
    }
}

// y = w · (x · r), or x · r without w: two rounded multiplies per element, in that order.
TANDEM_AVX512 void scale_rows_avx512(const float* x, const float* w, float r, int64_t n, float* y) {
    const __m512 rv = _mm512_set1_ps(r);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : lanes_below(n - i);
        const __m512 xr = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + i), rv);
        _mm512_mask_storeu_ps(y + i, live, w ? _mm512_mul_ps(_mm512_maskz_loadu_ps(live, w + i), xr) : xr);
    }
}

#pragma GCC diagnostic pop

}  // namespace tandem::cpu::detail

#endif
