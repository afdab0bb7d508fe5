// cpu/tile_avx512.cpp — the AVX-512 table's tile: which AVX-512 kernel a linear of R rows takes
// (tile_avx512, at the end), and the two-rows-per-register tile for BF16 / F16 / F32 of 2-15 rows.
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX2 / TANDEM_AVX512 use those
// instructions, and they call nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <type_traits>
#include <vector>

#include "cpu/decoders_avx2.h"
#include "cpu/pair_decoders_avx512.h"  // for TANDEM_AVX512

namespace tandem::cpu::detail {

namespace {

using namespace avx2;

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
// 13): silenced for this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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
// where the scratch kernel caught up (one thread, weights streamed: FP4 at 4 / 6 / 8 rows 72 / 50
// / 68 GFLOP/s in registers against 34 / 46 / 57; FP8 at 4 rows 40 against 34, at 6 and 8
// behind). BF16 / F16 / F32 decode in one or two operations, and up to 15 rows (a decode step's MoE experts take ~4) this file's two-rows-per-
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
        if (rows <= few) return few_rows_avx512(x, xs, rows, w, o0, o1, y, ys, fp8_route_for_this_cpu());
        return gemm_avx512(x, xs, rows, w, o0, o1, y, ys);
    }
    if (rows < 2) return avx2_kernels()->tile(x, xs, rows, w, o0, o1, y, ys);
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

// The AVX2 table with the AVX-512 tiles (this file's, few_rows_avx512.cpp's and gemm_avx512.cpp's)
// per-element kernels (axpys_avx512.cpp, elementwise_avx512.cpp) and two-head scores
// (dots_avx512.cpp); dot and dots stay AVX2 (one query's 8-lane order fills a zmm only with two
// keys side by side, a cross-lane insert per key), and so does the single axpy (a short tail of a
// few elements).
const kernel_table* avx512_kernels() {
    static const kernel_table t = [] {
        kernel_table k = *avx2_kernels();
        k.name = "avx512f+fma";
        k.tile = tile_avx512;
        k.dots_heads = dots_heads_avx512;
        k.axpys = axpys_avx512;
        k.exp_shifted = exp_shifted_avx512;
        k.swiglu = swiglu_avx512;
        k.scale_rows = scale_rows_avx512;
        return k;
    }();
    return &t;
}

}  // namespace tandem::cpu::detail

#else

namespace tandem::cpu::detail {
const kernel_table* avx512_kernels() { return nullptr; }
}  // namespace tandem::cpu::detail

#endif
