// cpu/gemv_fp4_avx512.cpp — one row (a decode step's GEMV) against FP4 e2m1 weights, AVX-512F.
//
// Why: with AVX2 each 8 FP4 weights cost a broadcast, a variable shift, a permute and three sign
// operations before their fma, and the FP4 GEMV ran at ~0.4 of the read bandwidth — the bound on
// `flash-slice`'s batch-1 decode, whose routed experts are FP4. AVX-512's two-table permute
// (vpermt2ps) looks up a 16-entry table of SIGNED values, and a zmm holds two outputs: lanes 0-7
// output j, lanes 8-15 output j+1, both at columns k..k+7. Per 16 weights: the two 32-bit words
// broadcast into their halves, one variable shift, one ternary-logic op (the nibble, plus the
// table-select bit in the upper half), one permute, one fma.
//
// Order: each half is exactly the ymm accumulator of the AVX2 1-row kernel for its output — the
// same fma per lane over k ≡ l (mod 8) in ascending k, the same hsum, the same scalar tail — and a
// table entry is ±(magnitude · scale), bitwise what the AVX2 decoder forms (its magnitude times
// the scale with the sign then flipped). So the bits are those of every other path (unit-tested
// against the fp32 expansion through the active table).
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define TANDEM_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define TANDEM_AVX512_INLINE __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline

namespace tandem::cpu::detail {

// GCC 12 flags the undefined upper half of _mm512_castps256_ps512 (as in kernels_avx2.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

// kernels_avx2.cpp's hsum: (l, l+4), (l, l+2), (0, 1).
TANDEM_AVX512_INLINE float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// The scale of column k in a row whose scales start at srow (FP4: one per 1 × 32).
TANDEM_AVX512_INLINE float fp4_scale(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    if (w.scale == scale_form::e8m0) return decode_e8m0(srow[scale_col_of(w, k)]);
    float s;
    __builtin_memcpy(&s, srow + 4 * scale_col_of(w, k), 4);
    return s;
}
TANDEM_AVX512_INLINE const uint8_t* fp4_scale_row(const weight_matrix& w, int64_t r) {
    return w.scales + ((w.row0 + r) / w.block_rows) * w.scale_cols * (w.scale == scale_form::f32 ? 4 : 1);
}

// The 16 signed e2m1 values times `scale`: entry c = value(c & 7) · scale, negated for c ≥ 8.
TANDEM_AVX512_INLINE __m512 signed_table(float scale) {
    const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                         -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(values, _mm512_set1_ps(scale));
}

// Outputs a[p], b[p] for p < P (b[p] may equal a[p]: its result is then dropped by the caller).
template <int P>
TANDEM_AVX512 void pairs_fp4(const float* x, const weight_matrix& w, const int64_t* a, const int64_t* b,
                             float* out_a, float* out_b) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7};
    // Prefetch as kernels_avx2.cpp's prefetch_ahead: the same offset of rows ≥ 16 KB ahead.
    const int64_t group = 2 * P * w.row_bytes();
    const int64_t ahead = group >= (16 << 10) || group <= 0 ? group : ((16 << 10) + group - 1) / group * group;
    const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i nibble = _mm512_set1_epi32(15);
    const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
    const uint8_t *ra[P], *rb[P], *sa[P], *sb[P];
    __m512 acc[P];
    for (int p = 0; p < P; ++p) {
        ra[p] = w.row_ptr(a[p]);
        rb[p] = w.row_ptr(b[p]);
        sa[p] = fp4_scale_row(w, a[p]);
        sb[p] = fp4_scale_row(w, b[p]);
        acc[p] = _mm512_setzero_ps();
    }
    for (int64_t kb = 0; kb < K8; kb += 32) {
        const int64_t ke = kb + 32 < K8 ? kb + 32 : K8;
        __m512 ta[P], tb[P];
        for (int p = 0; p < P; ++p) {
            ta[p] = signed_table(fp4_scale(w, sa[p], kb));
            tb[p] = signed_table(fp4_scale(w, sb[p], kb));
        }
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & 127) == 0)
                for (int p = 0; p < P; ++p) {
                    _mm_prefetch(reinterpret_cast<const char*>(ra[p]) + k / 2 + ahead, _MM_HINT_T2);
                    _mm_prefetch(reinterpret_cast<const char*>(rb[p]) + k / 2 + ahead, _MM_HINT_T2);
                }
            const __m512 x8 = _mm512_castps256_ps512(_mm256_loadu_ps(x + k));
            const __m512 xx = _mm512_shuffle_f32x4(x8, x8, 0x44);  // x[k..k+7] in both halves
            for (int p = 0; p < P; ++p) {
                int32_t wa, wb;
                __builtin_memcpy(&wa, ra[p] + k / 2, 4);
                __builtin_memcpy(&wb, rb[p] + k / 2, 4);
                const __m512i words = _mm512_mask_set1_epi32(_mm512_set1_epi32(wa), 0xff00, wb);
                // (nibble of the lane) | (16 in the upper half): 0xEA = (A & B) | C.
                const __m512i idx = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), nibble, upper, 0xEA);
                acc[p] = _mm512_fmadd_ps(xx, _mm512_permutex2var_ps(ta[p], idx, tb[p]), acc[p]);
            }
        }
    }
    for (int p = 0; p < P; ++p) {
        float sa = hsum8(_mm512_castps512_ps256(acc[p]));
        float sb = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
        for (int64_t k = K8; k < K; ++k) {
            sa = __builtin_fmaf(x[k], w.at(a[p], k), sa);
            sb = __builtin_fmaf(x[k], w.at(b[p], k), sb);
        }
        out_a[p] = sa;
        out_b[p] = sb;
    }
}

}  // namespace

TANDEM_AVX512 void gemv_fp4_avx512(const float* x, const weight_matrix& w, int64_t o0, int64_t o1, float* y) {
    constexpr int P = 4;  // 8 outputs per group: 4 accumulators, 8 tables
    int64_t a[P], b[P];
    float ya[P], yb[P];
    int64_t o = o0;
    for (; o + 2 * P <= o1; o += 2 * P) {
        for (int p = 0; p < P; ++p) a[p] = o + 2 * p, b[p] = o + 2 * p + 1;
        pairs_fp4<P>(x, w, a, b, ya, yb);
        for (int p = 0; p < P; ++p) y[a[p] - o0] = ya[p], y[b[p] - o0] = yb[p];
    }
    for (; o < o1; o += 2) {  // the last 1-7 outputs: a pair at a time, an odd one paired with itself
        a[0] = o;
        b[0] = o + 1 < o1 ? o + 1 : o;
        pairs_fp4<1>(x, w, a, b, ya, yb);
        y[a[0] - o0] = ya[0];
        if (b[0] != a[0]) y[b[0] - o0] = yb[0];
    }
}

#pragma GCC diagnostic pop

}  // namespace tandem::cpu::detail

#endif
