// cpu/pair_decoders_avx512.h — (cpu/ internal, AVX-512 translation units only) every stored weight
// form decoded two outputs at a time: one zmm = [w(a, k..k+7) | w(b, k..k+7)] as fp32.
//
// Why one shape for every form: the 1-3 row kernel (few_rows_avx512.cpp) and the GEMM (gemm_avx512.cpp) both
// keep one output's 8-lane accumulator in each half of a zmm, so what they need from a decoder is
// exactly this pair of 8-column runs. Each decoded value is bitwise what the AVX2 decoders of
// decoders_avx2.h form for the same weight (unscaled forms: the exact value; FP8: the fp16
// placement · 2^-8 times scale · 2^8; FP4: ±(magnitude · scale)), so every path keeps the bits.
//
// Included by the AVX-512 translation units after cpu/kernels_internal.h, inside their x86-64 +
// GCC guard; it defines their two function attributes.
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "cpu/decoders_avx2.h"
#include "cpu/kernels_internal.h"
#include "cpu/weight_matrix.h"

#define TANDEM_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define TANDEM_AVX512_INLINE __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline

namespace tandem::cpu::detail::pair512 {

// The scale of column k in a row whose scales start at srow.
TANDEM_AVX512_INLINE float scale_at(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    if (w.scale == scale_form::e8m0) return decode_e8m0(srow[scale_col_of(w, k)]);
    float s;
    __builtin_memcpy(&s, srow + 4 * scale_col_of(w, k), 4);
    return s;
}
using avx2::scale_row;  // where view row r's scales start

// Every decoder: `scaled` (whether a state per (pair, scale group) is needed), line_mask (k
// advances one 64-byte line of a row per line_mask + 1 columns), line_offset(k) (the byte of
// column k in a row), group(w) (columns per scale group: the AVX2 kernels' `block`), state /
// prepare(scale a, scale b) and load16(row a, row b, k, state).
struct unscaled_state {};

// What the unscaled forms share: no state.
struct unscaled_pair {
    static constexpr bool scaled = false;
    using state = unscaled_state;
    TANDEM_AVX512_INLINE static state prepare(float, float) { return {}; }
};

// Two 16-byte runs of one row each (columns k..k+7 of rows a and b) as the halves of a ymm.
TANDEM_AVX512_INLINE __m256i two_runs(const uint8_t* ra, const uint8_t* rb, int64_t offset) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ra + offset));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rb + offset));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// p[0..7] in both halves of a zmm: one broadcast load, no shuffle uop (a row's x against a pair of
// outputs, a key against a pair of heads).
TANDEM_AVX512_INLINE __m512 both_halves(const float* p) {
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(p))));
}
// [lo[0..7] | hi[0..7]]: two rows' (or heads') eight lanes side by side.
TANDEM_AVX512_INLINE __m512 halves_of(const float* lo, const float* hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(lo))),
                                               _mm256_castps_pd(_mm256_loadu_ps(hi)), 1));
}

struct f32_pair : unscaled_pair {
    static constexpr int64_t line_mask = 15;
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return 4 * k; }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state&) {
        return halves_of(reinterpret_cast<const float*>(ra) + k, reinterpret_cast<const float*>(rb) + k);
    }
};

struct bf16_pair : unscaled_pair {
    static constexpr int64_t line_mask = 31;
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return 2 * k; }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state&) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(two_runs(ra, rb, 2 * k)), 16));
    }
};

struct f16_pair : unscaled_pair {
    static constexpr int64_t line_mask = 31;
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return 2 * k; }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state&) {
        return _mm512_cvtph_ps(two_runs(ra, rb, 2 * k));
    }
};

// FP4: state = the two outputs' tables of the 16 signed e2m1 values · scale (entry c = value(c & 7)
// · scale, negated for c ≥ 8). The two 32-bit words broadcast into their halves, one variable
// shift, one ternary-logic op (the nibble, plus the table-select bit in the upper half) and one
// two-table permute (vpermt2ps) decode 16 weights.
struct fp4_pair {
    static constexpr bool scaled = true;
    static constexpr int64_t line_mask = 127;
    struct state {
        __m512 a, b;
    };
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return k >> 1; }  // k ≥ 0: no sign fix-up
    TANDEM_AVX512_INLINE static state prepare(float sa, float sb) {
        const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                             -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
        return {_mm512_mul_ps(values, _mm512_set1_ps(sa)), _mm512_mul_ps(values, _mm512_set1_ps(sb))};
    }
    TANDEM_AVX512_INLINE static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state& st) {
        const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
        int32_t wa, wb;
        __builtin_memcpy(&wa, ra + (k >> 1), 4);
        __builtin_memcpy(&wb, rb + (k >> 1), 4);
        const __m512i words = _mm512_mask_set1_epi32(_mm512_set1_epi32(wa), 0xff00, wb);
        // (nibble of the lane) | (16 in the upper half): 0xEA = (A & B) | C.
        const __m512i idx =
            _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(15), upper, 0xEA);
        return _mm512_permutex2var_ps(st.a, idx, st.b);
    }
};

// The FP4 tables of every E8M0 scale code, made once: entry c of code e = value(c) · 2^(e − 127)
// (code 0: 2^-127), the product prepare() forms in registers — the same IEEE multiply, so the same
// bits. Why: at one row a 32-column scale group costs the GEMV two broadcasts and two multiplies
// per pair, a fifth of its vector operations; two 64-byte loads from L1 cost none of them.
struct fp4_scale_tables {
    alignas(64) float t[256][16];
};
const fp4_scale_tables& fp4_tables();  // few_rows_avx512.cpp

// FP8: state = scale · 2^8 of output a in lanes 0-7, of output b in 8-15 (decoders_avx2.h's
// e4m3_decoder: a sign-extended byte << 7, bit 14 cleared, is the value · 2^-8 as fp16).
struct fp8_pair {
    static constexpr bool scaled = true;
    static constexpr int64_t line_mask = 63;
    struct state {
        __m512 f;
    };
    TANDEM_AVX512_INLINE static int64_t line_offset(int64_t k) { return k; }
    TANDEM_AVX512_INLINE static state prepare(float sa, float sb) {
        return {_mm512_mask_mov_ps(_mm512_set1_ps(sa * 256.0f), 0xff00, _mm512_set1_ps(sb * 256.0f))};
    }
    static __m512 load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state& st);  // below
};

// FP8 with its scale carried by x instead of the weights (few_rows_avx512.cpp folds 2^j into x
// where that is exact): the two outputs' codes as fp32 without a multiply. via_fp16: value · 2^-8
// (the placement above; never an fp32 subnormal). via_fp32: the code's bits placed straight into
// an fp32 as value · 2^-120 — one widening, one shift, one mask and no fp16 conversion (one core,
// L1-resident weights, Zen 4: 3.45 → 2.2 cycles per 16 weights against 3.0 via fp16), but the e4m3
// subnormal codes become fp32 subnormals, which Intel cores multiply through a microcode assist
// (README "FP8 decode without subnormals"), so only CPUs that take them at full speed use it.
template <fp8_decode_route Route>
TANDEM_AVX512_INLINE __m512 fp8_unscaled16(const uint8_t* ra, const uint8_t* rb, int64_t k) {
    const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ra + k));
    const __m128i both = _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(lo), reinterpret_cast<const double*>(rb + k)));
    if constexpr (Route == fp8_decode_route::via_fp32) {
        const __m512i d = _mm512_slli_epi32(_mm512_cvtepi8_epi32(both), 20);
        return _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0x87f00000u))));
    } else {
        const __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(both), 7);
        return _mm512_cvtph_ps(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0xbfff))));
    }
}
TANDEM_AVX512_INLINE __m512 fp8_pair::load16(const uint8_t* ra, const uint8_t* rb, int64_t k, const state& st) {
    return _mm512_mul_ps(st.f, fp8_unscaled16<fp8_decode_route::via_fp16>(ra, rb, k));
}
// log2 of what a code decoded by fp8_unscaled16 must be multiplied by to give its value.
template <fp8_decode_route Route>
inline constexpr int k_fp8_unscaled_exponent = Route == fp8_decode_route::via_fp32 ? 120 : 8;

// The state of pair (view rows whose scales start at sa, sb) for the scale group at column kb;
// tables: fp4_tables() for FP4 with E8M0 scales (looked up once per kernel call, outside its loops:
// a call inside them would spill every accumulator), else null.
template <class D>
TANDEM_AVX512_INLINE typename D::state prepare_at(const weight_matrix& w, const uint8_t* sa, const uint8_t* sb,
                                                  int64_t kb, const fp4_scale_tables* tables) {
    if constexpr (std::is_same_v<D, fp4_pair>) {
        if (tables) {
            const int64_t c = scale_col_of(w, kb);
            return {_mm512_load_ps(tables->t[sa[c]]), _mm512_load_ps(tables->t[sb[c]])};
        }
    }
    return D::prepare(scale_at(w, sa, kb), scale_at(w, sb, kb));
}
template <class D>
inline const fp4_scale_tables* tables_for(const weight_matrix& w) {
    if constexpr (std::is_same_v<D, fp4_pair>) return w.scale == scale_form::e8m0 ? &fp4_tables() : nullptr;
    else return nullptr;
}

// Columns per scale group, as the AVX2 kernels step them (FP4 32, FP8 its block width); the
// unscaled forms have one group over all of K8.
template <class D>
TANDEM_AVX512_INLINE int64_t group_of(const weight_matrix& w, int64_t k8) {
    if constexpr (!D::scaled) return k8 > 0 ? k8 : 8;
    else return w.form == weight_form::fp4_e2m1 ? 32 : w.block_cols;
}

using avx2::hsum;  // the AVX2 kernels' lane sum: (l, l+4), (l, l+2), (0, 1)
using avx2::prefetch_ahead;
TANDEM_AVX512_INLINE __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
TANDEM_AVX512_INLINE __m256 high_half(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// Lanes l + l+4 of a and b: one 128-bit block per 8-lane sum (sums 2q .. 2q + 3 of a, b = q, q + 1).
TANDEM_AVX512_INLINE __m512 sum_l_l4(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
// In each block p0 + p2 and p1 + p3, sums 0-3 from lo4 and 4-7 from hi4 side by side.
TANDEM_AVX512_INLINE __m512 sum_p_p2(__m512 lo4, __m512 hi4) {
    const __m512d a = _mm512_castps_pd(lo4), b = _mm512_castps_pd(hi4);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}
// Sixteen 8-lane sums at once, each in the hsum order — (l, l+4), (l, l+2), (0, 1): the same
// additions on the same operands, so the same bits as hsum of each half. v[0..3], u[0..3]: eight
// accumulators of two 8-lane halves each; half c of v[q] is sum 2q + c of "v", likewise for u.
// Block i of the result (i < 4): (v, i), (v, 4 + i), (u, i), (u, 4 + i) — callers permute it into
// the order they store (the scratch GEMM's two rows, the two-head dots' keys).
TANDEM_AVX512_INLINE __m512 lane_sums16(const __m512* v, const __m512* u) {
    const __m512 r = sum_p_p2(sum_l_l4(v[0], v[1]), sum_l_l4(v[2], v[3]));
    const __m512 r1 = sum_p_p2(sum_l_l4(u[0], u[1]), sum_l_l4(u[2], u[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(r, r1, 0x88), _mm512_shuffle_ps(r, r1, 0xDD));
}

}  // namespace tandem::cpu::detail::pair512
