// cpu/few_rows_avx512.cpp — one to eight rows (a decode step's GEMV; the few rows a batched step
// or a short prefill routes to one expert) against FP4 e2m1 or FP8 e4m3 weights, AVX-512F.
//
// Why: with AVX2 each 8 quantized weights cost five or six vector operations before their fma
// (FP4: a broadcast, a variable shift, a permute, three sign operations; FP8: a widening, a shift,
// a mask, an fp16 widening, the scale), and the FP4 / FP8 GEMVs ran at ~0.4 / ~0.65 of the read
// bandwidth — what bounds `flash-slice`'s batch-1 decode (FP4 experts, FP8 attention). A zmm holds
// two outputs: lanes 0-7 output j, lanes 8-15 output j+1, both at columns k..k+7, so one decode
// serves 16 weights (cpu/pair_decoders_avx512.h), and every row of the call fmas the same decoded
// register: two rows cost one decode, not two (the two-rows-per-register tile decoded each output
// once per row pair, with AVX2's decoders: 2-row FP4 / FP8 linears streamed at 3.5 / 6.7 GB/s
// against the GEMV's 8-10 / 14, and now at 6.2 / 15).
//
// Order: each half is exactly the ymm accumulator of the AVX2 kernels for its (row, output) — the
// same fma per lane over k ≡ l (mod 8) in ascending k, the same hsum, the same scalar tail — and
// each decoded weight is bitwise what the AVX2 decoders form (FP4: ±(magnitude · scale); FP8: the
// fp16 value · 2^-8 times scale · 2^8). So the bits are those of every other path (unit-tested
// against the fp32 expansion through the active table).
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include "cpu/pair_decoders_avx512.h"

namespace tandem::cpu::detail {

// GCC 12 flags the undefined upper half of _mm512_castps256_ps512 (as in tile_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using namespace pair512;

// FP8 with the scale folded into x. The other kernels multiply each decoded code by its block's
// scale (times 2^8) and fma it with x; here, where every output of the call's group shares one
// E8M0 scale 2^e, x is multiplied by 2^(e + 8) (or 2^(e + 120), fp8_unscaled16's two routes)
// once per column step for all its pairs and the codes are fma'd unscaled: the multiply per 16
// weights goes. Same bits: both form the exact product x · value · 2^e inside one fma, provided
// x · 2^j is exact — no overflow, no loss into an fp32 subnormal — and the loader keeps FP8 scales
// below 2^8, so value · scale never overflows on the other path. The call's x range decides, per
// scale group, whether that holds; where it does not, the group takes the scaled path.
//
// x_range: 2^(lo − 1) ≤ |x| < 2^hi over the call's nonzero x (every row, columns below K8).
struct x_range {
    bool finite;
    int lo, hi;
};

// On the bits of |x|, which order as the magnitudes do (inf and NaN above every finite value): one
// integer max, and one unsigned min of bits − 1 (a zero wraps to the top and never wins), per 16
// floats — a scan per call of the rows this kernel then reads once per output group.
TANDEM_AVX512 x_range range_of(const float* x, int64_t xs, int64_t rows, int64_t K8) {
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_set1_epi32(-1);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < K8; k += 16) {
            const __mmask16 live = K8 - k >= 16 ? __mmask16(0xffff) : __mmask16(0xff);  // K8 is a multiple of 8
            const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi32(live, x + r * xs + k), magnitude);
            hi = _mm512_max_epu32(hi, v);
            lo = _mm512_mask_min_epu32(lo, live, lo, _mm512_sub_epi32(v, one));
        }
    const uint32_t h = _mm512_reduce_max_epu32(hi), l = _mm512_reduce_min_epu32(lo) + 1u;
    if (h >= 0x7f800000u) return {false, 0, 0};  // inf or NaN
    if (h == 0) return {true, 1000, -1000};      // all zero: any power of two is exact
    auto bound = [](uint32_t bits) {  // frexp's exponent; subnormals: −126
        const int e = static_cast<int>(bits >> 23);
        return e == 0 ? -126 : e - 126;
    };
    return {true, bound(l), bound(h)};
}

// Whether x · 2^j is exact for the whole range (j ≥ 0 cannot lose bits below; j < 0 must keep
// every nonzero x normal).
TANDEM_AVX512_INLINE bool exact_scaling(const x_range& xr, int j) {
    if (!xr.finite || j < -126 || j > 127) return false;
    return xr.hi + j <= 128 && (j >= 0 || xr.lo - 1 + j >= -126);
}

// At the first column of each 64-byte line of the rows: the same offset `ahead` bytes on, into L2.
template <class D, int P>
TANDEM_AVX512_INLINE void prefetch_rows_ahead(const uint8_t* const* ra, const uint8_t* const* rb, int64_t k,
                                              int64_t ahead) {
    if ((k & D::line_mask) != 0) return;
    for (int p = 0; p < P; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(ra[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
        _mm_prefetch(reinterpret_cast<const char*>(rb[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
    }
}

template <fp8_decode_route Route, int R, int P>
TANDEM_AVX512_INLINE void fp8_folded_group(const float* x, int64_t xs, const uint8_t* const* ra,
                                           const uint8_t* const* rb, int64_t kb, int64_t ke, int64_t ahead, int j,
                                           __m512 (&acc)[R][P]) {
    const __m512 f = _mm512_castsi512_ps(_mm512_set1_epi32((j + 127) << 23));  // 2^j
    for (int64_t k = kb; k < ke; k += 8) {
        prefetch_rows_ahead<fp8_pair, P>(ra, rb, k, ahead);
        __m512 xx[R];
        for (int r = 0; r < R; ++r)
            xx[r] = _mm512_mul_ps(f, both_halves(x + r * xs + k));
        for (int p = 0; p < P; ++p) {
            const __m512 wv = fp8_unscaled16<Route>(ra[p], rb[p], k);
            for (int r = 0; r < R; ++r) acc[r][p] = _mm512_fmadd_ps(xx[r], wv, acc[r][p]);
        }
    }
}

// The scale group [kb, ke) folded (fp8_folded_group) through Route, when x · 2^j is exact for the
// call's x range; false leaves the group to the scaled path.
template <fp8_decode_route Route, int R, int P>
TANDEM_AVX512_INLINE bool fp8_folded_if_exact(const float* x, int64_t xs, const x_range& xr, int e,
                                              const uint8_t* const* ra, const uint8_t* const* rb, int64_t kb,
                                              int64_t ke, int64_t ahead, __m512 (&acc)[R][P]) {
    const int j = e + k_fp8_unscaled_exponent<Route>;
    if (!exact_scaling(xr, j)) return false;
    fp8_folded_group<Route, R, P>(x, xs, ra, rb, kb, ke, ahead, j, acc);
    return true;
}

// R rows (x[r·xs + k]) × outputs a[p], b[p] for p < P (b[p] may equal a[p]: its result is then
// dropped by the caller); results out[(r·P + p)·2 + 0/1]. xr: the call's x range (FP8 only).
template <class D, int R, int P>
TANDEM_AVX512 void pairs(const float* x, int64_t xs, const weight_matrix& w, const int64_t* a, const int64_t* b,
                         float* out, const x_range& xr, fp8_decode_route route) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7}, block = group_of<D>(w, K8);
    const fp4_scale_tables* tables = tables_for<D>(w);
    // The same offset of the rows at least 16 KB ahead, as the AVX2 kernels prefetch.
    const int64_t ahead = prefetch_ahead(w, 2 * P);
    const uint8_t *ra[P], *rb[P], *sa[P], *sb[P];
    __m512 acc[R][P];
    bool one_scale_row = w.scale == scale_form::e8m0;  // every output here reads one E8M0 scale per group
    for (int p = 0; p < P; ++p) {
        ra[p] = w.row_ptr(a[p]);
        rb[p] = w.row_ptr(b[p]);
        sa[p] = scale_row(w, a[p]);
        sb[p] = scale_row(w, b[p]);
        one_scale_row = one_scale_row && sa[p] == sa[0] && sb[p] == sa[0];
        for (int r = 0; r < R; ++r) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        // Folding costs a multiply per row and column step, the scaled path one per pair: only
        // while rows ≤ pairs (FP8 comes here up to 4 rows, with 4 pairs) is it the cheaper.
        if constexpr (std::is_same_v<D, fp8_pair> && R <= P) {
            if (one_scale_row) {
                const int e = static_cast<int>(sa[0][scale_col_of(w, kb)]) - 127;
                const bool folded =
                    route == fp8_decode_route::via_fp32
                        ? fp8_folded_if_exact<fp8_decode_route::via_fp32, R, P>(x, xs, xr, e, ra, rb, kb, ke, ahead, acc)
                        : fp8_folded_if_exact<fp8_decode_route::via_fp16, R, P>(x, xs, xr, e, ra, rb, kb, ke, ahead, acc);
                if (folded) continue;
            }
        }
        typename D::state st[P];
        for (int p = 0; p < P; ++p) st[p] = prepare_at<D>(w, sa[p], sb[p], kb, tables);
        for (int64_t k = kb; k < ke; k += 8) {
            prefetch_rows_ahead<D, P>(ra, rb, k, ahead);
            __m512 xx[R];  // x[k..k+7] of each row in both halves
            for (int r = 0; r < R; ++r)
                xx[r] = both_halves(x + r * xs + k);
            for (int p = 0; p < P; ++p) {
                const __m512 wv = D::load16(ra[p], rb[p], k, st[p]);
                for (int r = 0; r < R; ++r) acc[r][p] = _mm512_fmadd_ps(xx[r], wv, acc[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) {
            float ya = hsum(low_half(acc[r][p])), yb = hsum(high_half(acc[r][p]));
            for (int64_t k = K8; k < K; ++k) {
                ya = __builtin_fmaf(x[r * xs + k], w.at(a[p], k), ya);
                yb = __builtin_fmaf(x[r * xs + k], w.at(b[p], k), yb);
            }
            out[(r * P + p) * 2] = ya;
            out[(r * P + p) * 2 + 1] = yb;
        }
}

template <class D, int R>
TANDEM_AVX512 void rows_form(const float* x, int64_t xs, const weight_matrix& w, int64_t o0, int64_t o1, float* y,
                             int64_t ys, fp8_decode_route route) {
    const x_range xr = std::is_same_v<D, fp8_pair> && w.scale == scale_form::e8m0
                           ? range_of(x, xs, R, w.cols & ~int64_t{7})
                           : x_range{false, 0, 0};
    // 8 outputs per group up to 4 rows (4R accumulators, R x, FP4: 8 tables), then 4 (2R + R +
    // 4 tables): eight rows of four pairs would spill.
    constexpr int P = R <= 4 ? 4 : 2;
    int64_t a[P], b[P];
    float out[2 * R * P];
    int64_t o = o0;
    for (; o + 2 * P <= o1; o += 2 * P) {
        for (int p = 0; p < P; ++p) a[p] = o + 2 * p, b[p] = o + 2 * p + 1;
        pairs<D, R, P>(x, xs, w, a, b, out, xr, route);
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 2 * P; ++j) y[r * ys + (o + j - o0)] = out[r * 2 * P + j];
    }
    for (; o < o1; o += 2) {  // the last 1-7 outputs: a pair at a time, an odd one paired with itself
        a[0] = o;
        b[0] = o + 1 < o1 ? o + 1 : o;
        pairs<D, R, 1>(x, xs, w, a, b, out, xr, route);
        for (int r = 0; r < R; ++r) {
            y[r * ys + (a[0] - o0)] = out[2 * r];
            if (b[0] != a[0]) y[r * ys + (b[0] - o0)] = out[2 * r + 1];
        }
    }
}

template <class D>
TANDEM_AVX512 void few_rows_form(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0,
                                 int64_t o1, float* y, int64_t ys, fp8_decode_route route) {
    switch (rows) {
        case 1: return rows_form<D, 1>(x, xs, w, o0, o1, y, ys, route);
        case 2: return rows_form<D, 2>(x, xs, w, o0, o1, y, ys, route);
        case 3: return rows_form<D, 3>(x, xs, w, o0, o1, y, ys, route);
        case 4: return rows_form<D, 4>(x, xs, w, o0, o1, y, ys, route);
        case 5: return rows_form<D, 5>(x, xs, w, o0, o1, y, ys, route);
        case 6: return rows_form<D, 6>(x, xs, w, o0, o1, y, ys, route);
        case 7: return rows_form<D, 7>(x, xs, w, o0, o1, y, ys, route);
        default: return rows_form<D, 8>(x, xs, w, o0, o1, y, ys, route);
    }
}

}  // namespace

const fp4_scale_tables& pair512::fp4_tables() {
    static const fp4_scale_tables tables = [] {
        fp4_scale_tables t;
        for (int e = 0; e < 256; ++e)
            for (int c = 0; c < 16; ++c) {
                const float v = k_e2m1_values[c & 7] * decode_e8m0(static_cast<uint8_t>(e));
                t.t[e][c] = c & 8 ? -v : v;
            }
        return t;
    }();
    return tables;
}

void few_rows_avx512(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1,
                     float* y, int64_t ys, fp8_decode_route route) {
    if (w.form == weight_form::fp4_e2m1) return few_rows_form<fp4_pair>(x, xs, rows, w, o0, o1, y, ys, route);
    return few_rows_form<fp8_pair>(x, xs, rows, w, o0, o1, y, ys, route);
}

// AMD cores multiply fp32 subnormals at full speed (Zen 4: the via_fp32 loop measured the same
// with 1 in 16 codes subnormal as with none); Intel cores since Sandy Bridge take an assist.
fp8_decode_route fp8_route_for_this_cpu() {
    static const fp8_decode_route route = [] {
        __builtin_cpu_init();
        return __builtin_cpu_is("amd") ? fp8_decode_route::via_fp32 : fp8_decode_route::via_fp16;
    }();
    return route;
}

#pragma GCC diagnostic pop

}  // namespace tandem::cpu::detail

#endif
