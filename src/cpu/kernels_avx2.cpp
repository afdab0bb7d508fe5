// cpu/kernels_avx2.cpp — AVX2 + FMA kernels: weights decoded in registers, register-blocked.
//
// Only functions carrying TANDEM_AVX2 use AVX2 instructions, and they call nothing from the
// standard library, so no AVX2 copy of an inline std:: function can leak to other callers.
// Per output element the order is exactly the reference order (kernels_internal.h): one 8-lane
// accumulator per (row, output), fma per lane, the same pairwise lane sum and scalar fma tail.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <cmath>

#include "core/exp_f32.h"
#include "cpu/decoders_avx2.h"

namespace tandem::cpu::detail {

namespace {

using namespace avx2;

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

// Head by head: the AVX-512 table pairs heads in one register (dots_avx512.cpp); a ymm holds one.
TANDEM_AVX2 void dots_heads_avx2(const float* q, int64_t q_stride, int64_t heads, const float* const* keys,
                                 int64_t count, int64_t n, float* out, int64_t out_stride) {
    for (int64_t h = 0; h < heads; ++h) dots_avx2(q + h * q_stride, keys, count, n, out + h * out_stride);
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

// exp_f32 (core/exp_f32.h) on eight lanes: the same operations in the same order — compares and
// blends for the clamps (a NaN lane compares false and stays NaN, as in the scalar form), an
// fp32 multiply, round to nearest even, the fma chain, two exact powers of two — so each lane is
// bitwise the scalar function's.
TANDEM_AVX2 __m256 exp8(__m256 x) {
    using namespace exp_f32_detail;
    const __m256 lowest = _mm256_set1_ps(k_lowest), highest = _mm256_set1_ps(k_highest);
    x = _mm256_blendv_ps(x, lowest, _mm256_cmp_ps(x, lowest, _CMP_LT_OQ));
    x = _mm256_blendv_ps(x, highest, _mm256_cmp_ps(x, highest, _CMP_GT_OQ));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(k_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_lo), r);
    __m256 p = _mm256_set1_ps(k_c7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_c6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_c5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_c4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_c3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_c2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ordered = _mm256_castps_si256(_mm256_cmp_ps(n, n, _CMP_ORD_Q));
    const __m256i ni = _mm256_and_si256(_mm256_cvtps_epi32(n), ordered);  // NaN lanes: 0, as the scalar form
    const __m256i half = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, half);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// Lanes 0 .. n − 1 of eight (n < 8): the mask of a masked load (which reads zeros, and never
// faults, in the other lanes) and of the store that writes only the live ones.
TANDEM_AVX2 __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Eight exponentials per step, the last 1-7 through masked loads and stores (no scalar libm
// call). The sum is a plain ascending loop over the stored values, as the reference's.
TANDEM_AVX2 float exp_shifted_avx2(float* v, int64_t n, float shift) {
    const __m256 sv = _mm256_set1_ps(shift);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(v + j), sv)));
    if (j < n) {
        const __m256i live = lanes_below(n - j);
        _mm256_maskstore_ps(v + j, live, exp8(_mm256_sub_ps(_mm256_maskload_ps(v + j, live), sv)));
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += v[i];
    return sum;
}

// swiglu_reference on eight lanes: min(limit, g) and max(−limit, u) then min(limit, ·) are
// std::min / std::clamp's selections (x86 min/max return the second operand when either is NaN,
// so a NaN g or u passes through as in the scalar compares), then the same divide and multiply.
TANDEM_AVX2 __m256 swiglu8(__m256 g, __m256 u, __m256 limit) {
    const __m256 sign = _mm256_set1_ps(-0.0f);  // negation flips the sign bit, as the scalar unary minus
    const __m256 gc = _mm256_min_ps(limit, g);
    const __m256 uc = _mm256_min_ps(limit, _mm256_max_ps(_mm256_xor_ps(limit, sign), u));
    const __m256 silu = _mm256_div_ps(gc, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_xor_ps(gc, sign))));
    return _mm256_mul_ps(silu, uc);
}

TANDEM_AVX2 void swiglu_avx2(const float* g, const float* u, int64_t n, float limit, float* out) {
    const __m256 lv = _mm256_set1_ps(limit);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), lv));
    if (i < n) {
        const __m256i live = lanes_below(n - i);
        _mm256_maskstore_ps(out + i, live, swiglu8(_mm256_maskload_ps(g + i, live), _mm256_maskload_ps(u + i, live), lv));
    }
}

TANDEM_AVX2 void scale_rows_avx2(const float* x, const float* w, float r, int64_t n, float* y) {
    const __m256 rv = _mm256_set1_ps(r);
    int64_t i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), rv)));
        for (; i < n; ++i) y[i] = w[i] * (x[i] * r);
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), rv));
        for (; i < n; ++i) y[i] = x[i] * r;
    }
}

}  // namespace

const kernel_table* avx2_kernels() {
    static const kernel_table t{"avx2+fma",       tile_avx2,  dot_avx2,         dots_avx2,
                                dots_heads_avx2,  axpy_avx2,  axpys_avx2,       exp_shifted_avx2,
                                swiglu_avx2,      scale_rows_avx2};
    return &t;
}

}  // namespace tandem::cpu::detail

#else

namespace tandem::cpu::detail {
const kernel_table* avx2_kernels() { return nullptr; }
}  // namespace tandem::cpu::detail

#endif
