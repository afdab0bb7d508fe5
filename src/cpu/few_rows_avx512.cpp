// cpu/gemv_avx512.cpp — one row (a decode step's GEMV) against FP4 e2m1 or FP8 e4m3 weights,
// AVX-512F.
//
// Why: with AVX2 each 8 quantized weights cost five or six vector operations before their fma
// (FP4: a broadcast, a variable shift, a permute, three sign operations; FP8: a widening, a shift,
// a mask, an fp16 widening, the scale), and the FP4 / FP8 GEMVs ran at ~0.4 / ~0.65 of the read
// bandwidth — what bounds `flash-slice`'s batch-1 decode (FP4 experts, FP8 attention). A zmm holds
// two outputs: lanes 0-7 output j, lanes 8-15 output j+1, both at columns k..k+7, so one decode
// serves 16 weights. FP4: the two 32-bit words broadcast into their halves, one variable shift,
// one ternary-logic op (the nibble, plus the table-select bit in the upper half) and one
// two-table permute (vpermt2ps) over 16-entry tables of SIGNED values · scale. FP8: the two
// 8-byte groups in one xmm, one widening to 16 words, the fp16 placement (shift, mask), one
// widening to 16 floats, one multiply by the two scales.
//
// Order: each half is exactly the ymm accumulator of the AVX2 1-row kernel for its output — the
// same fma per lane over k ≡ l (mod 8) in ascending k, the same hsum, the same scalar tail — and
// each decoded weight is bitwise what the AVX2 decoders form (FP4: ±(magnitude · scale); FP8: the
// fp16 value · 2^-8 times scale · 2^8). So the bits are those of every other path (unit-tested
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

// The scale of column k in a row whose scales start at srow, and where a view row's scales start.
TANDEM_AVX512_INLINE float scale_at(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    if (w.scale == scale_form::e8m0) return decode_e8m0(srow[scale_col_of(w, k)]);
    float s;
    __builtin_memcpy(&s, srow + 4 * scale_col_of(w, k), 4);
    return s;
}
TANDEM_AVX512_INLINE const uint8_t* scale_row_of(const weight_matrix& w, int64_t r) {
    return w.scales + ((w.row0 + r) / w.block_rows) * w.scale_cols * (w.scale == scale_form::f32 ? 4 : 1);
}

// FP4: state = the two outputs' tables of the 16 signed e2m1 values · scale (entry c = value(c & 7)
// · scale, negated for c ≥ 8); one scale group is 32 columns; a 64-byte line holds 128 columns.
struct fp4_pair {
    static constexpr int64_t line_mask = 127;
    struct state {
        __m512 a, b;
    };
    TANDEM_AVX512_INLINE static int64_t group(const weight_matrix&) { return 32; }
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return k / 2; }
    TANDEM_AVX512_INLINE static state prepare(float sa, float sb) {
        const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                             -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
        return {_mm512_mul_ps(values, _mm512_set1_ps(sa)), _mm512_mul_ps(values, _mm512_set1_ps(sb))};
    }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state& st) {
        const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
        int32_t wa, wb;
        __builtin_memcpy(&wa, ra + k / 2, 4);
        __builtin_memcpy(&wb, rb + k / 2, 4);
        const __m512i words = _mm512_mask_set1_epi32(_mm512_set1_epi32(wa), 0xff00, wb);
        // (nibble of the lane) | (16 in the upper half): 0xEA = (A & B) | C.
        const __m512i idx =
            _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(15), upper, 0xEA);
        return _mm512_permutex2var_ps(st.a, idx, st.b);
    }
};

// FP8: state = scale · 2^8 of output a in lanes 0-7, of output b in 8-15 (kernels_avx2.cpp's
// e4m3_decoder: a sign-extended byte << 7, bit 14 cleared, is the value · 2^-8 as fp16).
struct fp8_pair {
    static constexpr int64_t line_mask = 63;
    struct state {
        __m512 f;
    };
    TANDEM_AVX512_INLINE static int64_t group(const weight_matrix& w) { return w.block_cols; }
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return k; }
    TANDEM_AVX512_INLINE static state prepare(float sa, float sb) {
        return {_mm512_mask_mov_ps(_mm512_set1_ps(sa * 256.0f), 0xff00, _mm512_set1_ps(sb * 256.0f))};
    }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state& st) {
        const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ra + k));
        const __m128i both = _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(lo), reinterpret_cast<const double*>(rb + k)));
        __m256i h = _mm256_cvtepi8_epi16(both);
        h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xbfff)));
        return _mm512_mul_ps(st.f, _mm512_cvtph_ps(h));
    }
};

// Outputs a[p], b[p] for p < P (b[p] may equal a[p]: its result is then dropped by the caller).
template <class D, int P>
TANDEM_AVX512 void pairs(const float* x, const weight_matrix& w, const int64_t* a, const int64_t* b, float* out_a,
                         float* out_b) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7}, block = D::group(w);
    // Prefetch as kernels_avx2.cpp's prefetch_ahead: the same offset of rows ≥ 16 KB ahead.
    const int64_t span = 2 * P * w.row_bytes();
    const int64_t ahead = span >= (16 << 10) || span <= 0 ? span : ((16 << 10) + span - 1) / span * span;
    const uint8_t *ra[P], *rb[P], *sa[P], *sb[P];
    __m512 acc[P];
    for (int p = 0; p < P; ++p) {
        ra[p] = w.row_ptr(a[p]);
        rb[p] = w.row_ptr(b[p]);
        sa[p] = scale_row_of(w, a[p]);
        sb[p] = scale_row_of(w, b[p]);
        acc[p] = _mm512_setzero_ps();
    }
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        typename D::state st[P];
        for (int p = 0; p < P; ++p) st[p] = D::prepare(scale_at(w, sa[p], kb), scale_at(w, sb[p], kb));
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & D::line_mask) == 0)
                for (int p = 0; p < P; ++p) {
                    _mm_prefetch(reinterpret_cast<const char*>(ra[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
                    _mm_prefetch(reinterpret_cast<const char*>(rb[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
                }
            const __m512 x8 = _mm512_castps256_ps512(_mm256_loadu_ps(x + k));
            const __m512 xx = _mm512_shuffle_f32x4(x8, x8, 0x44);  // x[k..k+7] in both halves
            for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(xx, D::load16(ra[p], rb[p], k, st[p]), acc[p]);
        }
    }
    for (int p = 0; p < P; ++p) {
        float ya = hsum8(_mm512_castps512_ps256(acc[p]));
        float yb = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
        for (int64_t k = K8; k < K; ++k) {
            ya = __builtin_fmaf(x[k], w.at(a[p], k), ya);
            yb = __builtin_fmaf(x[k], w.at(b[p], k), yb);
        }
        out_a[p] = ya;
        out_b[p] = yb;
    }
}

template <class D>
TANDEM_AVX512 void gemv_form(const float* x, const weight_matrix& w, int64_t o0, int64_t o1, float* y) {
    constexpr int P = 4;  // 8 outputs per group: 4 accumulators (FP4: 8 tables)
    int64_t a[P], b[P];
    float ya[P], yb[P];
    int64_t o = o0;
    for (; o + 2 * P <= o1; o += 2 * P) {
        for (int p = 0; p < P; ++p) a[p] = o + 2 * p, b[p] = o + 2 * p + 1;
        pairs<D, P>(x, w, a, b, ya, yb);
        for (int p = 0; p < P; ++p) y[a[p] - o0] = ya[p], y[b[p] - o0] = yb[p];
    }
    for (; o < o1; o += 2) {  // the last 1-7 outputs: a pair at a time, an odd one paired with itself
        a[0] = o;
        b[0] = o + 1 < o1 ? o + 1 : o;
        pairs<D, 1>(x, w, a, b, ya, yb);
        y[a[0] - o0] = ya[0];
        if (b[0] != a[0]) y[b[0] - o0] = yb[0];
    }
}

}  // namespace

void gemv_avx512(const float* x, const weight_matrix& w, int64_t o0, int64_t o1, float* y) {
    if (w.form == weight_form::fp4_e2m1) return gemv_form<fp4_pair>(x, w, o0, o1, y);
    return gemv_form<fp8_pair>(x, w, o0, o1, y);
}

#pragma GCC diagnostic pop

}  // namespace tandem::cpu::detail

#endif
