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

// R rows (x[r·xs + k]) × outputs a[p], b[p] for p < P (b[p] may equal a[p]: its result is then
// dropped by the caller); results out[(r·P + p)·2 + 0/1].
template <class D, int R, int P>
TANDEM_AVX512 void pairs(const float* x, int64_t xs, const weight_matrix& w, const int64_t* a, const int64_t* b,
                         float* out) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7}, block = group_of<D>(w, K8);
    const fp4_scale_tables* tables = tables_for<D>(w);
    // The same offset of the rows at least 16 KB ahead, as the AVX2 kernels prefetch.
    const int64_t ahead = prefetch_ahead(w, 2 * P);
    const uint8_t *ra[P], *rb[P], *sa[P], *sb[P];
    __m512 acc[R][P];
    for (int p = 0; p < P; ++p) {
        ra[p] = w.row_ptr(a[p]);
        rb[p] = w.row_ptr(b[p]);
        sa[p] = scale_row(w, a[p]);
        sb[p] = scale_row(w, b[p]);
        for (int r = 0; r < R; ++r) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t kb = 0; kb < K8; kb += block) {
        const int64_t ke = kb + block < K8 ? kb + block : K8;
        typename D::state st[P];
        for (int p = 0; p < P; ++p) st[p] = prepare_at<D>(w, sa[p], sb[p], kb, tables);
        for (int64_t k = kb; k < ke; k += 8) {
            if ((k & D::line_mask) == 0)
                for (int p = 0; p < P; ++p) {
                    _mm_prefetch(reinterpret_cast<const char*>(ra[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
                    _mm_prefetch(reinterpret_cast<const char*>(rb[p]) + D::line_offset(k) + ahead, _MM_HINT_T2);
                }
            __m512 xx[R];  // x[k..k+7] of each row in both halves
            for (int r = 0; r < R; ++r)
                xx[r] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(x + r * xs + k))));
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
                             int64_t ys) {
    // 8 outputs per group up to 4 rows (4R accumulators, R x, FP4: 8 tables), then 4 (2R + R +
    // 4 tables): eight rows of four pairs would spill.
    constexpr int P = R <= 4 ? 4 : 2;
    int64_t a[P], b[P];
    float out[2 * R * P];
    int64_t o = o0;
    for (; o + 2 * P <= o1; o += 2 * P) {
        for (int p = 0; p < P; ++p) a[p] = o + 2 * p, b[p] = o + 2 * p + 1;
        pairs<D, R, P>(x, xs, w, a, b, out);
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 2 * P; ++j) y[r * ys + (o + j - o0)] = out[r * 2 * P + j];
    }
    for (; o < o1; o += 2) {  // the last 1-7 outputs: a pair at a time, an odd one paired with itself
        a[0] = o;
        b[0] = o + 1 < o1 ? o + 1 : o;
        pairs<D, R, 1>(x, xs, w, a, b, out);
        for (int r = 0; r < R; ++r) {
            y[r * ys + (a[0] - o0)] = out[2 * r];
            if (b[0] != a[0]) y[r * ys + (b[0] - o0)] = out[2 * r + 1];
        }
    }
}

template <class D>
TANDEM_AVX512 void few_rows_form(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0,
                                 int64_t o1, float* y, int64_t ys) {
    switch (rows) {
        case 1: return rows_form<D, 1>(x, xs, w, o0, o1, y, ys);
        case 2: return rows_form<D, 2>(x, xs, w, o0, o1, y, ys);
        case 3: return rows_form<D, 3>(x, xs, w, o0, o1, y, ys);
        case 4: return rows_form<D, 4>(x, xs, w, o0, o1, y, ys);
        case 5: return rows_form<D, 5>(x, xs, w, o0, o1, y, ys);
        case 6: return rows_form<D, 6>(x, xs, w, o0, o1, y, ys);
        case 7: return rows_form<D, 7>(x, xs, w, o0, o1, y, ys);
        default: return rows_form<D, 8>(x, xs, w, o0, o1, y, ys);
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
                     float* y, int64_t ys) {
    if (w.form == weight_form::fp4_e2m1) return few_rows_form<fp4_pair>(x, xs, rows, w, o0, o1, y, ys);
    return few_rows_form<fp8_pair>(x, xs, rows, w, o0, o1, y, ys);
}

#pragma GCC diagnostic pop

}  // namespace tandem::cpu::detail

#endif
