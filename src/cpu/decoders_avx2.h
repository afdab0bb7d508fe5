// cpu/decoders_avx2.h — (cpu/ internal, x86-64 + GCC translation units only) the AVX2 decoders
// of every stored weight form (8 weights of one row → 8 floats) and the helpers around them:
// the lane sum, the prefetch distance, the scale lookup. Shared by the AVX2 kernels
// (kernels_avx2.cpp) and the AVX-512 tile that broadcasts their output (tile_avx512.cpp); the
// functions carry TANDEM_AVX2 and call nothing from the standard library.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/weight_matrix.h"

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TANDEM_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace tandem::cpu::detail::avx2 {

TANDEM_AVX2_INLINE float hsum(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // (l, l+4)
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // (l, l+2)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                 // (0, 1)
}

// Prefetching: rows are short (a few KB) and read O at a time, so the hardware prefetchers
// restart at every group and a look-ahead inside the row (the old 1 KB) left the first KB of
// every row a demand miss. Each stream instead prefetches the same offset of the NEXT group's
// row (the view's rows are contiguous: O rows ahead), into L2 (T2: L1 is too small to hold a
// group ahead). Measured on one Zen 3 core: bf16 GEMV 7–9 → 16–18 GB/s per core.

// A decoder turns 8 consecutive stored weights of one row into 8 floats, scaled: scaled forms
// get a per-(row, column block) state from prepare(factor), factor = the scale (times 2^120 for
// e4m3); unscaled forms ignore the state.
struct f32_decoder {
    static constexpr int64_t line_mask = 15;  // k advances one 64-byte line per line_mask + 1
    static constexpr bool scaled = false;
    static constexpr int row_group = 3;  // rows per main-loop block of tile_form (no decode to share)
    TANDEM_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t k, __m256) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    }
};

struct bf16_decoder {
    static constexpr int64_t line_mask = 31;  // k advances one 64-byte line per line_mask + 1
    static constexpr bool scaled = false;
    static constexpr int row_group = 6;  // rows per main-loop block of tile_form
    TANDEM_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t k, __m256) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
};

struct f16_decoder {
    static constexpr int64_t line_mask = 31;  // k advances one 64-byte line per line_mask + 1
    static constexpr bool scaled = false;
    static constexpr int row_group = 6;  // rows per main-loop block of tile_form
    TANDEM_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t k, __m256) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
    }
};

struct e4m3_decoder {
    static constexpr int64_t line_mask = 63;  // k advances one 64-byte line per line_mask + 1
    static constexpr bool scaled = true;
    static constexpr int row_group = 6;  // rows per main-loop block of tile_form
    // Through fp16: a sign-extended byte shifted left by 7 puts the code's exponent and mantissa
    // on fp16's bits 7-13 and its sign on bit 15 (bit 14, a sign copy, is cleared), which is the
    // value · 2^-8 exactly — e4m3 subnormals land on fp16 subnormals — and vcvtph2ps widens that
    // to a NORMAL fp32. The former decode went through value · 2^-120, an fp32 subnormal for
    // every subnormal code: on Intel cores each such multiply takes a microcode assist (~100+
    // cycles), which held the FP8 GEMV to 0.03 of the read bandwidth on random codes.
    // state: the block's scale · 2^8, broadcast (one exact rounding per weight, as before).
    TANDEM_AVX2_INLINE static __m256 prepare(float factor) { return _mm256_set1_ps(factor); }
    TANDEM_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t k, __m256 state) {
        __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k)));
        h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(static_cast<short>(0xbfff)));
        return _mm256_mul_ps(state, _mm256_cvtph_ps(h));
    }
};

struct e2m1_decoder {
    static constexpr int64_t line_mask = 127;  // k advances one 64-byte line per line_mask + 1
    static constexpr bool scaled = true;
    static constexpr int row_group = 6;  // rows per main-loop block of tile_form
    // state: the eight e2m1 magnitudes times the group's scale (exact for power-of-two scales,
    // one rounding per value otherwise — the same product the scalar path forms), made once per
    // 32 weights. Eight nibbles of one 32-bit word (element j at bits 4j..4j+3): a variable shift
    // brings each to the bottom of its lane, a permute looks up the scaled magnitude, bit 3
    // becomes the sign.
    TANDEM_AVX2_INLINE static __m256 prepare(float factor) {
        return _mm256_mul_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), _mm256_set1_ps(factor));
    }
    TANDEM_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t k, __m256 state) {
        int32_t word;
        __builtin_memcpy(&word, row + k / 2, 4);
        __m256i n = _mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        __m256 mag = _mm256_permutevar8x32_ps(state, n);
        __m256i sign = _mm256_and_si256(_mm256_slli_epi32(n, 28), _mm256_set1_epi32(static_cast<int>(0x80000000u)));
        return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
    }
};

// How far ahead each weight stream prefetches: the same offset of the next output group's rows,
// pushed on by whole groups to at least 16 KB. With short rows (bf16 K = 256: 512 B, the experts'
// w2 and wq_b of `small`) one group is only 1.5–4 KB ahead, too little in flight to cover memory
// latency: measured per CPU-second on 64 MiB of K = 256 bf16, GEMV 14 → 17 GB/s and 4-row GEMM
// 30 → 42–47 GFLOP/s; unchanged at K = 1024. A prefetch past the matrix end is a harmless hint.
TANDEM_AVX2_INLINE int64_t prefetch_ahead(const weight_matrix& w, int64_t outputs) {
    constexpr int64_t k_min_ahead = 16 << 10;
    const int64_t group = outputs * w.row_bytes();
    return group >= k_min_ahead || group <= 0 ? group : (k_min_ahead + group - 1) / group * group;
}

// The scale row of view row r (its tile row), and the multiplier a scaled decoder's output needs
// for column k: the scale, times 2^8 for e4m3 (see e4m3_decoder; exact: the loader keeps FP8
// scales below 2^8). Inline: FP4 needs one per 32 weights per output.
TANDEM_AVX2_INLINE const uint8_t* scale_row(const weight_matrix& w, int64_t r) {
    const int64_t elem = w.scale == scale_form::f32 ? 4 : 1;
    return w.scales + ((w.row0 + r) / w.block_rows) * w.scale_cols * elem;
}
TANDEM_AVX2_INLINE float factor_of(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    float s;
    if (w.scale == scale_form::e8m0) {
        s = decode_e8m0(srow[scale_col_of(w, k)]);
    } else {
        __builtin_memcpy(&s, srow + 4 * scale_col_of(w, k), 4);
    }
    return w.form == weight_form::fp8_e4m3 ? s * 256.0f : s;
}

}  // namespace tandem::cpu::detail::avx2
