// cpu/kernels_avx2.cpp — AVX2 + FMA kernels: weights decoded in registers, register-blocked.
//
// Only functions carrying TANDEM_AVX2 use AVX2 instructions, and they call nothing from the
// standard library, so no AVX2 copy of an inline std:: function can leak to other callers.
// Per output element the order is exactly the reference order (kernels_internal.h): one 8-lane
// accumulator per (row, output), fma per lane, the same pairwise lane sum and scalar fma tail.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <cmath>
#include <type_traits>
#include <vector>

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TANDEM_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace tandem::cpu::detail {

namespace {

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

// R rows × O outputs: rows x[r] (stride xs), outputs o[0..O) (view rows), results out[r·O + j].
template <class D, int R, int O>
TANDEM_AVX2 void micro(const weight_matrix& w, const float* x, int64_t xs, const int64_t* o, float* out,
                       int64_t span = O) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7};
    const int64_t block = D::scaled ? (w.form == weight_form::fp4_e2m1 ? 32 : w.block_cols) : (K8 > 0 ? K8 : 8);
    const uint8_t* row[O];
    const uint8_t* srow[O];
    for (int j = 0; j < O; ++j) {
        row[j] = w.row_ptr(o[j]);
        if constexpr (D::scaled) srow[j] = scale_row(w, o[j]);
    }
    const int64_t ahead = prefetch_ahead(w, span);  // see the prefetch note; span: as in rows_block
    __m256 acc[R][O];
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < O; ++j) acc[r][j] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        __m256 f[O];
        for (int j = 0; j < O; ++j) {
            if constexpr (D::scaled) f[j] = D::prepare(factor_of(w, srow[j], kb));
            else f[j] = _mm256_setzero_ps();
        }
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & D::line_mask) == 0)
                for (int j = 0; j < O; ++j)
                    _mm_prefetch(reinterpret_cast<const char*>(row[j]) + k * 64 / (D::line_mask + 1) + ahead,
                                 _MM_HINT_T2);
            __m256 xv[R];
            for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * xs + k);
            for (int j = 0; j < O; ++j) {
                const __m256 wv = D::load8(row[j], k, f[j]);
                for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < O; ++j) {
            float s = hsum(acc[r][j]);
            for (int64_t k = K8; k < K; ++k) s = __builtin_fmaf(x[r * xs + k], w.at(o[j], k), s);
            out[r * O + j] = s;
        }
}

// The same fmas on the same accumulators in the same k order as micro (so the same bits), loops
// the other way round: the O weight vectors are decoded once per k step and each row's x streams
// past them — R·O accumulators + O weights + one x (6 × 2: 15 registers, 4 × 3: 16), one decode
// per R fmas. A separate function, not a branch inside micro: GCC then keeps micro's
// accumulators in registers (with both loop orders in one body it spilled them every step).
template <class D, int R, int O>
TANDEM_AVX2 void micro_wfirst(const weight_matrix& w, const float* x, int64_t xs, const int64_t* o, float* out,
                              int64_t span = O) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7};
    const int64_t block = D::scaled ? (w.form == weight_form::fp4_e2m1 ? 32 : w.block_cols) : (K8 > 0 ? K8 : 8);
    const uint8_t* row[O];
    const uint8_t* srow[O];
    for (int j = 0; j < O; ++j) {
        row[j] = w.row_ptr(o[j]);
        if constexpr (D::scaled) srow[j] = scale_row(w, o[j]);
    }
    const int64_t ahead = prefetch_ahead(w, span);
    __m256 acc[R][O];
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < O; ++j) acc[r][j] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        __m256 f[O];
        for (int j = 0; j < O; ++j) {
            if constexpr (D::scaled) f[j] = D::prepare(factor_of(w, srow[j], kb));
            else f[j] = _mm256_setzero_ps();
        }
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & D::line_mask) == 0)
                for (int j = 0; j < O; ++j)
                    _mm_prefetch(reinterpret_cast<const char*>(row[j]) + k * 64 / (D::line_mask + 1) + ahead,
                                 _MM_HINT_T2);
            __m256 wv[O];
            for (int j = 0; j < O; ++j) wv[j] = D::load8(row[j], k, f[j]);
            for (int r = 0; r < R; ++r) {
                __m256 xv = _mm256_loadu_ps(x + r * xs + k);
                // One load per row, not one per fma: GCC would fold the load into every fma's
                // memory operand, and R·O + O loads per R·O fmas bound the loop on the load ports.
                __asm__("" : "+x"(xv));
                for (int j = 0; j < O; ++j) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < O; ++j) {
            float s = hsum(acc[r][j]);
            for (int64_t k = K8; k < K; ++k) s = __builtin_fmaf(x[r * xs + k], w.at(o[j], k), s);
            out[r * O + j] = s;
        }
}

// Rows in groups of R, outputs in groups of O; span: the outputs the O rows stride over (O when
// consecutive), which sets the look-ahead distance.
template <class D, int R, int O>
TANDEM_AVX2 void rows_block(const float* x, int64_t xs, int64_t r0, const weight_matrix& w, const int64_t* o,
                            float* y, int64_t ys, int64_t o_base, int64_t span = O) {
    float out[R * O];
    if constexpr (R >= 4) micro_wfirst<D, R, O>(w, x + r0 * xs, xs, o, out, span);
    else micro<D, R, O>(w, x + r0 * xs, xs, o, out, span);
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < O; ++j) y[(r0 + r) * ys + (o[j] - o_base)] = out[r * O + j];
}

// Outputs [o0, o1) in groups of O (then singly) for R rows starting at r. Rows shorter than a
// page are grouped one per page, as the AVX-512 tile does (see pairs_across_outputs there for
// why). The GEMV (one row) gains most: `small`'s batch-1 decode on this VM's Xeon 120 → 139–140
// tok/s, 0.83–0.89 → 1.05 of the read bandwidth (README "CPU kernels").
template <class D, int R, int O>
TANDEM_AVX2 void across_outputs(const float* x, int64_t xs, int64_t r, const weight_matrix& w, int64_t o0, int64_t o1,
                                float* y, int64_t ys) {
    int64_t idx[O];
    int64_t o = o0;
    const int64_t row_bytes = w.row_bytes(), s = row_bytes > 0 && row_bytes < 4096 ? 4096 / row_bytes : 1;
    for (; s > 1 && o + O * s <= o1; o += O * s)
        for (int64_t c = 0; c < s; ++c) {
            for (int j = 0; j < O; ++j) idx[j] = o + c + s * j;
            rows_block<D, R, O>(x, xs, r, w, idx, y, ys, o0, O * s);
        }
    for (; o + O <= o1; o += O) {
        for (int j = 0; j < O; ++j) idx[j] = o + j;
        rows_block<D, R, O>(x, xs, r, w, idx, y, ys, o0);
    }
    for (; o < o1; ++o) {
        idx[0] = o;
        rows_block<D, R, 1>(x, xs, r, w, idx, y, ys, o0);
    }
}

// One decoder over a tile. Stored forms take rows six at a time, each group sweeping every
// output of the block two at a time: 12 accumulators, the two decoded weight vectors and one x
// vector fill 15 of AVX2's 16 registers, so each weight vector is decoded once per six FMAs
// (bf16: a widening load and a shift; FP8/FP4: four to six instructions competing with the FMAs
// for the vector pipes) and each pass over the block (in L2) serves six rows. fp32 has nothing
// to decode and takes rows three at a time × 4 outputs (7 loads per 12 FMAs where 6 × 2 needs 8).
// The 1–5 rows left: 4 rows take 3 outputs (one decode per four FMAs — MoE experts often get 4
// rows of a batch), 3 rows 4 outputs, 5 rows three then two, 2 rows 4 outputs, and 1 row (GEMV)
// 8 outputs: eight weight streams in flight and eight independent FMA chains. Measured on this
// VM's Zen 4 (CPU time, L2-resident 48 × 1024 block, best of 3 while shared): against 3 × 4
// everywhere, FP8 GEMMs 1.2–1.4×, FP4 1.5–1.8×, bf16 1.06–1.1×, 4-row blocks 1.06–1.7×.
template <class D>
TANDEM_AVX2 void tile_form(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                           float* y, int64_t ys) {
    constexpr int G = D::row_group;
    int64_t r = 0;
    for (; rows - r > 5; r += G) {
        if constexpr (G == 6) across_outputs<D, 6, 2>(x, xs, r, w, o0, o1, y, ys);
        else across_outputs<D, 3, 4>(x, xs, r, w, o0, o1, y, ys);
    }
    switch (rows - r) {
        case 5:
            across_outputs<D, 3, 4>(x, xs, r, w, o0, o1, y, ys);
            across_outputs<D, 2, 4>(x, xs, r + 3, w, o0, o1, y, ys);
            break;
        case 4: across_outputs<D, 4, 3>(x, xs, r, w, o0, o1, y, ys); break;
        case 3: across_outputs<D, 3, 4>(x, xs, r, w, o0, o1, y, ys); break;
        case 2: across_outputs<D, 2, 4>(x, xs, r, w, o0, o1, y, ys); break;
        case 1: across_outputs<D, 1, 8>(x, xs, r, w, o0, o1, y, ys); break;
        default: break;
    }
}

TANDEM_AVX2 void tile_avx2(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                           float* y, int64_t ys) {
    switch (w.form) {
        case weight_form::f32: return tile_form<f32_decoder>(x, xs, rows, w, o0, o1, y, ys);
        case weight_form::bf16: return tile_form<bf16_decoder>(x, xs, rows, w, o0, o1, y, ys);
        case weight_form::f16: return tile_form<f16_decoder>(x, xs, rows, w, o0, o1, y, ys);
        case weight_form::fp8_e4m3: return tile_form<e4m3_decoder>(x, xs, rows, w, o0, o1, y, ys);
        case weight_form::fp4_e2m1: return tile_form<e2m1_decoder>(x, xs, rows, w, o0, o1, y, ys);
    }
}

TANDEM_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
    const int64_t n8 = n & ~int64_t{7};
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < n8; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    float s = hsum(acc);
    for (int64_t k = n8; k < n; ++k) s = __builtin_fmaf(a[k], b[k], s);
    return s;
}

// Four keys at a time: four independent fma chains hide the fma latency that a single dot
// (one chain) waits on; each key's lanes, pairwise sum and tail are dot_avx2's.
TANDEM_AVX2 void dots_avx2(const float* q, const float* const* keys, int64_t count, int64_t n, float* out) {
    const int64_t n8 = n & ~int64_t{7};
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
        const float* k0 = keys[j];
        const float* k1 = keys[j + 1];
        const float* k2 = keys[j + 2];
        const float* k3 = keys[j + 3];
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int64_t k = 0; k < n8; k += 8) {
            const __m256 qv = _mm256_loadu_ps(q + k);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + k), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + k), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + k), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + k), a3);
        }
        float s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
        for (int64_t k = n8; k < n; ++k) {
            s0 = __builtin_fmaf(q[k], k0[k], s0);
            s1 = __builtin_fmaf(q[k], k1[k], s1);
            s2 = __builtin_fmaf(q[k], k2[k], s2);
            s3 = __builtin_fmaf(q[k], k3[k], s3);
        }
        out[j] = s0, out[j + 1] = s1, out[j + 2] = s2, out[j + 3] = s3;
    }
    for (; j < count; ++j) out[j] = dot_avx2(q, keys[j], n);
}

TANDEM_AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    // Mul then add, as the reference. GCC contracts a mul_ps feeding an add_ps into an fma
    // when fma is enabled (-ffp-contract=fast); the empty asm makes the product a value it
    // cannot see through.
    for (; i + 8 <= n; i += 8) {
        __m256 p = _mm256_mul_ps(av, _mm256_loadu_ps(x + i));
        __asm__("" : "+x"(p));
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), p));
    }
    for (; i < n; ++i) {
        __m128 p = _mm_mul_ss(_mm_set_ss(a), _mm_set_ss(x[i]));
        __asm__("" : "+x"(p));
        y[i] = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(y[i]), p));
    }
}

// y[i] = (…((y[i] + a0·x0[i]) + a1·x1[i]) + …), each product and each sum rounded, as count
// axpy_avx2 calls. 64 elements of y (eight registers: eight independent add chains) stay in
// registers while every x streams past, then the next 64; the rest go through axpy_avx2 per x,
// whose per-element operations are the same.
TANDEM_AVX2 void axpys_avx2(const float* a, const float* const* x, int64_t count, float* y, int64_t n) {
    constexpr int V = 8;
    int64_t i = 0;
    for (; i + 8 * V <= n; i += 8 * V) {
        __m256 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = _mm256_loadu_ps(y + i + 8 * v);
        for (int64_t j = 0; j < count; ++j) {
            const __m256 av = _mm256_set1_ps(a[j]);
            const float* xj = x[j] + i;
            for (int v = 0; v < V; ++v) {
                __m256 p = _mm256_mul_ps(av, _mm256_loadu_ps(xj + 8 * v));
                __asm__("" : "+x"(p));  // no fma contraction (see axpy_avx2)
                acc[v] = _mm256_add_ps(acc[v], p);
            }
        }
        for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + i + 8 * v, acc[v]);
    }
    if (i < n)
        for (int64_t j = 0; j < count; ++j) axpy_avx2(a[j], x[j] + i, y + i, n - i);
}


// ---- AVX-512: two rows per register ---------------------------------------------------------
//
// Why: on cores with two 512-bit FMA units (this VM's Intel Xeon: 213 GFLOP/s per core with
// zmm FMA chains against 113 with ymm), a zmm FMA does twice a ymm one's work. The reduction
// order must stay the 8-lane one (kernels_internal.h), so a zmm holds TWO rows' 8 lanes, not
// 16 lanes of one row: lanes 0-7 are row r's accumulator for an output, lanes 8-15 row r+1's,
// and each half sees exactly the fmas, in exactly the order, that the ymm kernels give that
// row. x is packed per tile into row pairs ([x_r(k..k+7) | x_r+1(k..k+7)] per 8 columns, one
// zmm load), the 8 decoded weights of an output are broadcast to both halves, and each half
// is summed with hsum at the end. A single BF16 / F16 / F32 row (GEMV, memory-bound) stays on the
// AVX2 tile; which rows and forms this tile takes at all: tile_avx512 below.
// Needs only AVX-512F; the table is chosen at startup like the AVX2 one.
// GCC 12's AVX-512 intrinsics (shuffle, extract) pass an _mm512_undefined_* operand and then warn
// that it may be (or, depending on inlining, is) used uninitialized (GCC bug 105593, fixed in
// 13): silenced for this section.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TANDEM_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define TANDEM_AVX512_INLINE __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline

// The 8 decoded weights of one output at column k, in both halves. bf16: a 16-byte broadcast
// load (no shuffle uop), one widening and one shift; the other forms decode as in AVX2 and
// broadcast (one more shuffle).
template <class D>
TANDEM_AVX512_INLINE __m512 load8_both(const uint8_t* row, int64_t k, __m256 state) {
    if constexpr (std::is_same_v<D, bf16_decoder>) {
        const __m256i h = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
        const __m512 v = _mm512_castps256_ps512(D::load8(row, k, state));
        return _mm512_shuffle_f32x4(v, v, 0x44);  // 128-bit blocks 0, 1, 0, 1
    }
}

// P row pairs × O outputs (any O rows; their look-ahead is `span` rows of the matrix ahead: O
// for consecutive rows, O · s for rows s apart). xp: the packed pairs (pair p's columns k..k+7
// at xp + p·2·K8 + 2k); x, xs: the same rows unpacked (for the scalar tail); rows: how many of
// the 2P rows are real (the last pair of an odd count repeats its row, and that half's result
// is dropped). Results out[r·O + j] for r < 2P.
template <class D, int P, int O>
TANDEM_AVX512 void micro512(const weight_matrix& w, const float* xp, const float* x, int64_t xs, int rows,
                            const int64_t* o, float* out, int64_t span = O) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7};
    const int64_t block = D::scaled ? (w.form == weight_form::fp4_e2m1 ? 32 : w.block_cols) : (K8 > 0 ? K8 : 8);
    const uint8_t* row[O];
    const uint8_t* srow[O];
    for (int j = 0; j < O; ++j) {
        row[j] = w.row_ptr(o[j]);
        if constexpr (D::scaled) srow[j] = scale_row(w, o[j]);
    }
    const int64_t ahead = prefetch_ahead(w, span);  // span: the outputs this group's rows stride over
    __m512 acc[P][O];
    for (int p = 0; p < P; ++p)
        for (int j = 0; j < O; ++j) acc[p][j] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        __m256 f[O];
        for (int j = 0; j < O; ++j) {
            if constexpr (D::scaled) f[j] = D::prepare(factor_of(w, srow[j], kb));
            else f[j] = _mm256_setzero_ps();
        }
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & D::line_mask) == 0)
                for (int j = 0; j < O; ++j)
                    _mm_prefetch(reinterpret_cast<const char*>(row[j]) + k * 64 / (D::line_mask + 1) + ahead,
                                 _MM_HINT_T2);
            __m512 wv[O];
            for (int j = 0; j < O; ++j) wv[j] = load8_both<D>(row[j], k, f[j]);
            for (int p = 0; p < P; ++p) {
                __m512 xv = _mm512_loadu_ps(xp + p * 2 * K8 + 2 * k);
                __asm__("" : "+v"(xv));  // one load per pair, not one folded into every fma
                for (int j = 0; j < O; ++j) acc[p][j] = _mm512_fmadd_ps(xv, wv[j], acc[p][j]);
            }
        }
    }
    for (int p = 0; p < P; ++p)
        for (int j = 0; j < O; ++j) {
            const __m256 lo = _mm512_castps512_ps256(acc[p][j]);
            const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][j]), 1));
            for (int h = 0; h < 2; ++h) {
                const int r = 2 * p + h;
                float s = hsum(h == 0 ? lo : hi);
                if (r < rows)
                    for (int64_t k = K8; k < K; ++k) s = __builtin_fmaf(x[r * xs + k], w.at(o[j], k), s);
                out[r * O + j] = s;
            }
        }
}

// Pairs [p0, p0 + P) over outputs [o0, o1) in groups of O, then singly.
//
// Rows shorter than a 4 KB page (bf16 K = 1024: 2 KB, the MoE's w2 at K = 256: 512 B) are
// grouped one per page: O outputs `s` = 4096 / row_bytes apart, then the next O one row further
// on, so after s groups O whole pages were read, each from its first byte to its last. Why: with
// O consecutive rows a page held 2–8 of the group's O interleaved row streams, and the L2
// streamer (which follows ascending accesses within a page) found no stream to run ahead on;
// the software look-ahead alone (presumably bounded by the core's ~16 line-fill buffers: the
// hardware counters were not read) held the small-M expert GEMMs to ~9 GB/s per core. (A tensor need not start on a page boundary; its
// rows then straddle two pages, each still read in ascending order.) Measured on this VM's
// Xeon, `small`'s expert shapes as grouped 4-row bf16 linears over 1 GB (bench_moe_stream):
// two threads 15.8–16.3 → 19.6–19.9 GB/s; one thread 8.5–9.1 → 11.0 (w2, 512 B rows: 7.8–8.4
// → 10.4–10.7); `small`'s batch-16 decode +4–10% ("Model benchmark" in README). Results are
// per output: no bit changes.
template <class D, int P, int O>
TANDEM_AVX512 void pairs_across_outputs(const float* xp, const float* x, int64_t xs, int64_t rows, int64_t p0,
                                        const weight_matrix& w, int64_t o0, int64_t o1, float* y, int64_t ys) {
    const int64_t K8 = w.cols & ~int64_t{7}, r0 = 2 * p0;
    const int real = static_cast<int>(rows - r0 < 2 * P ? rows - r0 : 2 * P);
    const float* xg = xp + p0 * 2 * K8;
    int64_t idx[O];
    float out[2 * P * O];
    int64_t o = o0;
    const int64_t row_bytes = w.row_bytes(), s = row_bytes > 0 && row_bytes < 4096 ? 4096 / row_bytes : 1;
    for (; s > 1 && o + O * s <= o1; o += O * s)
        for (int64_t c = 0; c < s; ++c) {
            for (int j = 0; j < O; ++j) idx[j] = o + c + s * j;
            micro512<D, P, O>(w, xg, x + r0 * xs, xs, real, idx, out, O * s);
            for (int r = 0; r < real; ++r)
                for (int j = 0; j < O; ++j) y[(r0 + r) * ys + (idx[j] - o0)] = out[r * O + j];
        }
    for (; o + O <= o1; o += O) {
        for (int j = 0; j < O; ++j) idx[j] = o + j;
        micro512<D, P, O>(w, xg, x + r0 * xs, xs, real, idx, out);
        for (int r = 0; r < real; ++r)
            for (int j = 0; j < O; ++j) y[(r0 + r) * ys + (o + j - o0)] = out[r * O + j];
    }
    for (; o < o1; ++o) {
        idx[0] = o;
        micro512<D, P, 1>(w, xg, x + r0 * xs, xs, real, idx, out);
        for (int r = 0; r < real; ++r) y[(r0 + r) * ys + (o - o0)] = out[r];
    }
}

// rows ≥ 2: packs the pairs into xp (room for ceil(rows / 2) · 2 · K8 floats), then runs them
// four pairs at a time × 4 outputs (16 accumulators + 4 weights + 1 x of the 32 zmm registers:
// one weight decode per 8 row-fmas), the 1–3 pairs left with more outputs each.
template <class D>
TANDEM_AVX512 void tile512_form(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0,
                                int64_t o1, float* y, int64_t ys, float* xp) {
    const int64_t K8 = w.cols & ~int64_t{7}, pairs = (rows + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
        const float* a = x + 2 * p * xs;
        const float* b = 2 * p + 1 < rows ? a + xs : a;
        float* dst = xp + p * 2 * K8;
        for (int64_t k = 0; k < K8; k += 8) {
            _mm256_storeu_ps(dst + 2 * k, _mm256_loadu_ps(a + k));
            _mm256_storeu_ps(dst + 2 * k + 8, _mm256_loadu_ps(b + k));
        }
    }
    int64_t p = 0;
    for (; pairs - p >= 4; p += 4) pairs_across_outputs<D, 4, 4>(xp, x, xs, rows, p, w, o0, o1, y, ys);
    switch (pairs - p) {
        case 3: pairs_across_outputs<D, 3, 4>(xp, x, xs, rows, p, w, o0, o1, y, ys); break;
        case 2: pairs_across_outputs<D, 2, 6>(xp, x, xs, rows, p, w, o0, o1, y, ys); break;
        case 1: pairs_across_outputs<D, 1, 8>(xp, x, xs, rows, p, w, o0, o1, y, ys); break;
        default: break;
    }
}

#pragma GCC diagnostic pop

// Which AVX-512 kernel a tile takes. FP4 up to eight rows, FP8 up to four: each weight decoded
// once in registers for every row (few_rows_avx512.cpp); more rows decode it once into an L1
// scratch that all the tile's rows then stream past (gemm_avx512.cpp) — decoding them inside the
// FMA loop, once per four row pairs, cost more vector operations than the FMAs. The limits are
// where the scratch kernel caught up (one thread, weights streamed: FP4 at 4 / 6 / 8 rows 72 / 50 /
// 68 GFLOP/s in registers against 34 / 46 / 57; FP8 at 4 rows 40 against 34, at 6 and 8 behind). BF16 / F16 / F32 decode in one or two
// operations, and up to 15 rows (a decode step's MoE experts take ~4) this file's two-rows-per-
// register tile streams the weights better from memory; from 16 rows (a batch-16 step's dense
// linears, every prefill tile) the scratch kernel wins. Measured on the Intel VM with the weights
// streamed from memory (README "CPU kernels").
constexpr int64_t k_gemm_min_rows_unscaled = 16;
constexpr int64_t k_few_rows_max_fp4 = 8;
constexpr int64_t k_few_rows_max_fp8 = 4;

// Not an AVX-512 function itself: the packed-x buffer is a std::vector, whose inline code must
// not be compiled for AVX-512 (see the file comment). Grown only, per thread.
void tile_avx512(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1, float* y,
                 int64_t ys) {
    if (w.form == weight_form::fp4_e2m1 || w.form == weight_form::fp8_e4m3) {
        const int64_t few = w.form == weight_form::fp4_e2m1 ? k_few_rows_max_fp4 : k_few_rows_max_fp8;
        if (rows <= few) return few_rows_avx512(x, xs, rows, w, o0, o1, y, ys);
        return gemm_avx512(x, xs, rows, w, o0, o1, y, ys);
    }
    if (rows < 2) return tile_avx2(x, xs, rows, w, o0, o1, y, ys);
    if (rows >= k_gemm_min_rows_unscaled) return gemm_avx512(x, xs, rows, w, o0, o1, y, ys);
    thread_local std::vector<float> packed;
    const size_t need = static_cast<size_t>((rows + 1) / 2 * 2 * (w.cols & ~int64_t{7}));
    if (packed.size() < need) packed.resize(need);
    float* xp = packed.data();
    switch (w.form) {
        case weight_form::f32: return tile512_form<f32_decoder>(x, xs, rows, w, o0, o1, y, ys, xp);
        case weight_form::bf16: return tile512_form<bf16_decoder>(x, xs, rows, w, o0, o1, y, ys, xp);
        case weight_form::f16: return tile512_form<f16_decoder>(x, xs, rows, w, o0, o1, y, ys, xp);
        default: return;  // FP4 / FP8 never come here (above)
    }
}

}  // namespace

const kernel_table* avx2_kernels() {
    static const kernel_table t{"avx2+fma", tile_avx2, dot_avx2, dots_avx2, axpy_avx2, axpys_avx2};
    return &t;
}

// The AVX2 table with the AVX-512 tiles (tile_avx512: this file's, few_rows_avx512.cpp's and
// gemm_avx512.cpp's); dot, dots and the axpys stay AVX2.
const kernel_table* avx512_kernels() {
    static const kernel_table t{"avx512f+fma", tile_avx512, dot_avx2, dots_avx2, axpy_avx2, axpys_avx2};
    return &t;
}

}  // namespace tandem::cpu::detail

#else

namespace tandem::cpu::detail {
const kernel_table* avx2_kernels() { return nullptr; }
const kernel_table* avx512_kernels() { return nullptr; }
}  // namespace tandem::cpu::detail

#endif
