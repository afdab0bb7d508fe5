// cpu/gemm_avx512.cpp — two or more rows against any stored weight form, AVX-512F: each output
// pair's weights decoded ONCE per tile into a small fp32 scratch, then every row of the tile
// streams past them.
//
// Why: the former AVX-512 tile decoded the weights inside its FMA loop, once per group of four
// row pairs, and on this VM's Xeon (zmm FMAs and the bf16 widening + shift all on ports 0 and 5)
// each decode cost the FMA pipes as much as a quarter of its FMAs; and it read its packed x
// (two rows per register) from L2 at 32 bytes a cycle. Here the decode pass is separate: it reads
// each weight once (a 16-row batch decodes a weight once instead of twice, a 60-row prefill tile
// once instead of eight times) and writes [w(a, k..k+7) | w(b, k..k+7)] runs into scratch; the FMA
// pass then only loads: eight such runs (plain loads from L1, each into a register once and used
// by every row of the block), three rows' x[k..k+7] (broadcast loads, no packing), 24 FMAs. While
// the FMA pass runs, the next output group's weights are prefetched into L2, so memory and
// arithmetic overlap instead of taking turns.
//
// Why 16 outputs × 3 rows, not 8 × 6: a tile's x rows (60 × 512 columns: 120 KB) live in L2, and
// each 32-byte x load feeds one FMA per pair of the group — 8 bytes from L2 per FMA with four
// pairs held the FMA loop at ~0.7 of the core's peak (0.95 with x in L1), 4 bytes with eight pairs
// reach ~0.95 (a standalone loop over 60 rows, 3 December). A scratch run used as a memory operand
// of each row's FMA ran at half that speed on this Xeon; loaded once into a register it does not.
//
// Order: each (row, output) accumulator is one half of a zmm and sees exactly the fmas of the
// AVX2 kernels' ymm accumulator (lane l: k ≡ l mod 8, ascending k — the k loop is split into
// chunks only to keep the scratch in L1, and the accumulators are stored and reloaded between
// chunks, which changes no bit), then the same hsum and the same scalar tail; each scratch value
// is bitwise what the AVX2 decoders form (cpu/pair_decoders_avx512.h). So the bits are those of
// every other path, whatever the rows, the register block or the chunking.
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <cstdint>
#include <vector>

#include "cpu/pair_decoders_avx512.h"

namespace tandem::cpu::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using namespace pair512;

constexpr int k_pairs = 8;        // output pairs per group: 16 outputs
constexpr int k_rows = 3;         // rows per FMA block: 24 accumulators + 3 x + 1 weight run of 32 registers
constexpr int64_t k_chunk = 512;  // columns per decode chunk: 8 pairs × 512 × 8 B = 32 KB of scratch

// One output group: pairs (a[q], b[q]), q < 8 — sixteen consecutive outputs (see gemm_form). A
// group of fewer than 16 outputs (the block's last) repeats its last one in the missing places:
// those results are the same bits written to the same output again, so every group runs the full
// 8-pair kernels.
struct group {
    int64_t a[k_pairs], b[k_pairs];
    bool full_contiguous = false;  // outputs a[0], b[0], a[1], … are a[0] + 0, 1, 2, …, 15
};

group consecutive_group(int64_t o, int64_t o1) {
    group g;
    const int64_t n = o1 - o < 2 * k_pairs ? o1 - o : 2 * k_pairs;
    for (int q = 0; q < k_pairs; ++q) {
        g.a[q] = o + (2 * q < n ? 2 * q : n - 1);
        g.b[q] = o + (2 * q + 1 < n ? 2 * q + 1 : n - 1);
    }
    g.full_contiguous = n == 2 * k_pairs;
    return g;
}

// Prefetches the next group's rows into L2 a little at a time: the FMA loops call step() once
// per column step, so those weights arrive while this group computes (memory and arithmetic
// overlap instead of taking turns). A hint past the matrix is harmless.
struct prefetcher {
    const char* next = nullptr;
    const char* end = nullptr;
    int lines = 1;  // per step: the group's bytes spread evenly over its column steps (see run_group)
    TANDEM_AVX512_INLINE void step() {
        for (int i = 0; i < lines && next < end; ++i, next += 64) _mm_prefetch(next, _MM_HINT_T1);
    }
};

// The first chunk starts its accumulators at +0 in registers (no zeroing pass over the rows ×
// 8 accumulators, no loads): the same +0 a stored zero would reload, so no bit changes.
template <int R>
TANDEM_AVX512_INLINE void load_acc(__m512 (&a)[R][k_pairs], const float* acc, bool first) {
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < k_pairs; ++q)
            a[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 16 * (r * k_pairs + q));
}
template <int R>
TANDEM_AVX512_INLINE void store_acc(const __m512 (&a)[R][k_pairs], float* acc) {
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < k_pairs; ++q) _mm512_storeu_ps(acc + 16 * (r * k_pairs + q), a[r][q]);
}
// Scratch: pair q's run for column k of the chunk starting at k0 at scratch + q·k_pair_stride +
// 2(k − k0), the stride fixed (so every run is a constant displacement from one pointer) with one
// 64-byte line more than the runs: with 2·512 floats exactly (4 KB) the pairs' runs of a column step
// fell into the same L1 set, beside the x rows (4 KB apart too).
constexpr int64_t k_pair_stride = 2 * k_chunk + 16;
constexpr int64_t k_scratch_floats = k_pairs * k_pair_stride;

template <int R>
TANDEM_AVX512_INLINE void fma_rows(__m512 (&a)[R][k_pairs], int q, __m512 wv, const __m512 (&xv)[R]) {
    for (int r = 0; r < R; ++r) a[r][q] = _mm512_fmadd_ps(xv[r], wv, a[r][q]);
}
template <int R>
TANDEM_AVX512_INLINE void load_x(__m512 (&xv)[R], const float* x, int64_t xs, int64_t k) {
    for (int r = 0; r < R; ++r) xv[r] = both_halves(x + r * xs + k);
}

// v, u: rows r's and r + 1's four accumulators of a half group (four pairs, eight outputs), summed
// in the hsum order (pair512::lane_sums16). Result: [row r outputs 0..7 | row r + 1 outputs 0..7].
TANDEM_AVX512_INLINE __m512 reduce_two_rows(const __m512* v, const __m512* u) {
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, lane_sums16(v, u));
}

// Where a row pair's 16 results of half h of the group go, relative to row r's outputs (a short
// group, with repeated outputs): [row r outputs 8h..8h + 7 | row r + 1 the same].
TANDEM_AVX512_INLINE __m512i places_of(const group& g, int64_t ys, int64_t o0, int h) {
    alignas(64) int32_t at[16];
    for (int row = 0; row < 2; ++row)
        for (int j = 0; j < 8; ++j)
            at[8 * row + j] = static_cast<int32_t>(row * ys + ((j & 1 ? g.b : g.a)[4 * h + j / 2] - o0));
    return _mm512_load_si512(at);
}

// Where a row block's results go when its last chunk sums them in registers (run_group: K a
// multiple of 8, so no scalar tail): instead of storing the accumulators for finish() to reload,
// the block reduces them as finish() would — the same additions on the same operands — and stores
// the outputs. y: the block's first row; places: a short group's scatter offsets per half.
struct result_sink {
    float* y = nullptr;
    int64_t ys = 0, o0 = 0;
    const group* g = nullptr;
    const __m512i* places = nullptr;
};

// Rows in pairs through reduce_two_rows; an odd last row is paired with itself and only its own
// half is stored.
template <int R>
TANDEM_AVX512_INLINE void reduce_and_store(const __m512 (&a)[R][k_pairs], const result_sink& out) {
    for (int r = 0; r < R; r += 2) {
        const bool both = r + 1 < R;
        const int r1 = both ? r + 1 : r;
        float* const yr = out.y + r * out.ys;
        for (int h = 0; h < 2; ++h) {
            const __m512 sums = reduce_two_rows(&a[r][4 * h], &a[r1][4 * h]);
            if (out.g->full_contiguous) {
                const int64_t at = out.g->a[0] + 8 * h - out.o0;
                _mm256_storeu_ps(yr + at, low_half(sums));
                if (both) _mm256_storeu_ps(yr + out.ys + at, high_half(sums));
            } else {
                _mm512_mask_i32scatter_ps(yr, both ? __mmask16(0xffff) : __mmask16(0x00ff), out.places[h], sums, 4);
            }
        }
    }
}

// The end of a block's chunk: its accumulators kept for the next chunk, or, at the last one with
// a sink, its results.
template <int R>
TANDEM_AVX512_INLINE void end_chunk(const __m512 (&a)[R][k_pairs], float* acc, const result_sink* sink) {
    if (sink) reduce_and_store<R>(a, *sink);
    else store_acc<R>(a, acc);
}

// Decodes the chunk's columns [k0, k1) of the group's pairs into scratch: the scaled forms, whose
// per-group states leave no registers for a fused block. A scale group may straddle two chunks
// (a block wider than k_chunk, or one that does not divide it): each part takes its group's state.
// P pairs at a time side by side (FP4's scale group is only 4 column steps: independent decode
// chains per step keep the vector pipes busy, one pair at a time left them waiting); see
// rows_share_one_l1_set for P.
template <class D, int P>
TANDEM_AVX512 void decode_chunk(const weight_matrix& w, const group& g, int64_t k0, int64_t k1, int64_t k8,
                                float* scratch) {
    const int64_t block = group_of<D>(w, k8);
    const fp4_scale_tables* tables = tables_for<D>(w);
    const uint8_t *ra[k_pairs], *rb[k_pairs], *sa[k_pairs], *sb[k_pairs];
    for (int q = 0; q < k_pairs; ++q) {
        ra[q] = w.row_ptr(g.a[q]), rb[q] = w.row_ptr(g.b[q]);
        sa[q] = scale_row(w, g.a[q]), sb[q] = scale_row(w, g.b[q]);
    }
    float* dst = scratch - 2 * k0;
    for (int64_t kb = k0; kb < k1;) {
        const int64_t group_end = (kb / block + 1) * block, ke = group_end < k1 ? group_end : k1;
        typename D::state st[k_pairs];
        for (int q = 0; q < k_pairs; ++q) st[q] = prepare_at<D>(w, sa[q], sb[q], kb, tables);
        for (int q0 = 0; q0 < k_pairs; q0 += P)
            for (int64_t k = kb; k < ke; k += 8)
                for (int q = q0; q < q0 + P; ++q)
                    _mm512_storeu_ps(dst + q * k_pair_stride + 2 * k, D::load16(ra[q], rb[q], k, st[q]));
        kb = ke;
    }
}

// Pairs decode_chunk takes side by side: all eight, but four when rows are a multiple of 4 KB
// (FP8 at K = 4096): the sixteen rows then fall in ONE set of the L1 (8-way on Zen 4) and evicted
// each other's lines between column steps. FP8, 16 rows, K = 4096 on the Zen 4 VM: one core in L2
// 71-72 -> 79-87 GFLOP/s, two threads from memory 71-128 -> 117-157 (six alternating runs). Where
// the rows spread over two sets or more, eight stay ahead (FP8 at K = 1024: 127-136 against
// 117-127; FP4 at K = 4096, 2 KB rows: 83 against 63-71 in L2).
inline bool rows_share_one_l1_set(const weight_matrix& w) { return w.row_bytes() % 4096 == 0; }

// The first row block of an unscaled form: decodes each column step's runs, keeps them in scratch
// for the other row blocks and uses them at once — the decode's loads and stores hide among this
// block's FMAs instead of being a pass of their own.
template <class D, int R>
TANDEM_AVX512 void decode_fma_chunk(const weight_matrix& w, const group& g, int64_t k0, int64_t k1, const float* x,
                                    int64_t xs, float* scratch, float* acc, prefetcher& pf, const result_sink* sink) {
    const uint8_t *ra[k_pairs], *rb[k_pairs];
    for (int q = 0; q < k_pairs; ++q) ra[q] = w.row_ptr(g.a[q]), rb[q] = w.row_ptr(g.b[q]);
    __m512 a[R][k_pairs];
    load_acc<R>(a, acc, k0 == 0);
    for (int64_t k = k0; k < k1; k += 8) {
        pf.step();
        __m512 xv[R];
        load_x<R>(xv, x, xs, k);
        for (int q = 0; q < k_pairs; ++q) {
            const __m512 wv = D::load16(ra[q], rb[q], k, {});
            _mm512_storeu_ps(scratch + q * k_pair_stride + 2 * (k - k0), wv);
            fma_rows<R>(a, q, wv, xv);
        }
    }
    end_chunk<R>(a, acc, sink);
}

// R rows over the chunk's columns from scratch.
template <int R>
TANDEM_AVX512 void fma_chunk(const float* x, int64_t xs, const float* scratch, int64_t k0, int64_t n, float* acc,
                             prefetcher& pf, const result_sink* sink) {
    __m512 a[R][k_pairs];
    load_acc<R>(a, acc, k0 == 0);
    for (int64_t s = 0; s < n; s += 8) {
        pf.step();
        __m512 xv[R];
        load_x<R>(xv, x, xs, k0 + s);
        for (int q = 0; q < k_pairs; ++q) {
            __m512 wv = _mm512_loadu_ps(scratch + q * k_pair_stride + 2 * s);
            asm("" : "+v"(wv));
            fma_rows<R>(a, q, wv, xv);
        }
    }
    end_chunk<R>(a, acc, sink);
}

TANDEM_AVX512 void fma_block(int rows, const float* x, int64_t xs, const float* scratch, int64_t k0, int64_t n,
                             float* acc, prefetcher& pf, const result_sink* sink) {
    switch (rows) {
        case 3: return fma_chunk<3>(x, xs, scratch, k0, n, acc, pf, sink);
        case 2: return fma_chunk<2>(x, xs, scratch, k0, n, acc, pf, sink);
        default: return fma_chunk<1>(x, xs, scratch, k0, n, acc, pf, sink);
    }
}

template <class D>
TANDEM_AVX512 void decode_fma_block(int rows, const weight_matrix& w, const group& g, int64_t k0, int64_t k1,
                                    const float* x, int64_t xs, float* scratch, float* acc, prefetcher& pf,
                                    const result_sink* sink) {
    switch (rows) {
        case 3: return decode_fma_chunk<D, 3>(w, g, k0, k1, x, xs, scratch, acc, pf, sink);
        case 2: return decode_fma_chunk<D, 2>(w, g, k0, k1, x, xs, scratch, acc, pf, sink);
        default: return decode_fma_chunk<D, 1>(w, g, k0, k1, x, xs, scratch, acc, pf, sink);
    }
}

// The results of the group's rows where K has a scalar tail (or no multiple of 8 at all): each
// output's hsum, then the tail's fmas in ascending k, stored at its place. Without a tail the row
// blocks sum their results in registers instead (reduce_and_store).
TANDEM_AVX512 void finish(const weight_matrix& w, const group& g, int64_t rows, const float* x, int64_t xs,
                          const float* acc, float* y, int64_t ys, int64_t o0) {
    const int64_t K = w.cols, K8 = K & ~int64_t{7};
    for (int64_t r = 0; r < rows; ++r)
        for (int q = 0; q < k_pairs; ++q) {
            const __m512 v = _mm512_loadu_ps(acc + 16 * (r * k_pairs + q));
            float ya = hsum(low_half(v)), yb = hsum(high_half(v));
            for (int64_t k = K8; k < K; ++k) {
                ya = __builtin_fmaf(x[r * xs + k], w.at(g.a[q], k), ya);
                yb = __builtin_fmaf(x[r * xs + k], w.at(g.b[q], k), yb);
            }
            y[r * ys + (g.a[q] - o0)] = ya;
            y[r * ys + (g.b[q] - o0)] = yb;
        }
}

// One group over all columns: per chunk the decode (fused into the first row block for unscaled
// forms) and every row block's FMAs, then the results. acc_all: rows × 8 accumulators (16 floats
// each), kept across chunks; pf: what to prefetch meanwhile.
template <class D>
TANDEM_AVX512 void run_group(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, const group& g,
                             prefetcher pf, float* y, int64_t ys, int64_t o0, float* scratch, float* acc_all) {
    const int64_t K8 = w.cols & ~int64_t{7};
    if (K8 == 0)  // no chunk runs to start the accumulators (see load_acc): finish reads zeros
        for (int64_t i = 0; i < rows * k_pairs; ++i) _mm512_storeu_ps(acc_all + 16 * i, _mm512_setzero_ps());
    // Rows in blocks of at most three, as even as possible (4 rows: 2 + 2, not 3 + 1, whose one-row
    // block has too few independent FMA chains to fill the pipes).
    const int64_t blocks = (rows + k_rows - 1) / k_rows, base = rows / blocks, extra = rows % blocks;
    const auto block_rows = [&](int64_t b) { return static_cast<int>(base + (b < extra ? 1 : 0)); };
    // Spread evenly: a burst of prefetches waits for line-fill buffers and stalls the FMAs.
    const int64_t steps = (K8 / 8) * blocks, lines = (pf.end - pf.next + 63) / 64;
    pf.lines = static_cast<int>(steps > 0 ? (lines + steps - 1) / steps : 1);
    const bool one_set = D::scaled && rows_share_one_l1_set(w);
    // Without a scalar tail, each block's last chunk sums its results in registers (result_sink).
    const bool sums_in_registers = K8 > 0 && K8 == w.cols;
    __m512i places[2] = {};  // only short groups use them
    if (sums_in_registers && !g.full_contiguous) places[0] = places_of(g, ys, o0, 0), places[1] = places_of(g, ys, o0, 1);
    for (int64_t k0 = 0; k0 < K8; k0 += k_chunk) {
        const int64_t k1 = k0 + k_chunk < K8 ? k0 + k_chunk : K8;
        const bool last = sums_in_registers && k1 == K8;
        const auto sink_at = [&](int64_t row) { return result_sink{y + row * ys, ys, o0, &g, places}; };
        int64_t b = 0, r = 0;
        if constexpr (D::scaled) {
            if (one_set) decode_chunk<D, k_pairs / 2>(w, g, k0, k1, K8, scratch);
            else decode_chunk<D, k_pairs>(w, g, k0, k1, K8, scratch);
        } else {
            const result_sink first = sink_at(0);
            decode_fma_block<D>(block_rows(0), w, g, k0, k1, x, xs, scratch, acc_all, pf, last ? &first : nullptr);
            r = block_rows(b++);
        }
        for (; b < blocks; r += block_rows(b++)) {
            const result_sink here = sink_at(r);
            fma_block(block_rows(b), x + r * xs, xs, scratch, k0, k1 - k0, acc_all + 16 * k_pairs * r, pf,
                      last ? &here : nullptr);
        }
    }
    if (!sums_in_registers) finish(w, g, rows, x, xs, acc_all, y, ys, o0);
}

// The tile: groups of 16 consecutive outputs, each prefetching the next group's rows into L2.
// Not one row per page, as the AVX2 tile and the GEMVs group short rows (bf16 K = 1024: 2 KB) for
// the L2 streamer: sixteen rows at the same offset of sixteen pages share one set of the L1
// (8-way on Zen 4, 12-way on Ice Lake), so the decode's lines were evicted between their column
// steps and fetched again. Measured on a Zen 4 VM (16 rows, bf16 K = 1024, weights streamed from
// memory, two threads, four alternating runs): page-apart groups 118-136 GFLOP/s, consecutive
// 129-160; one core with the weights in L2: 74-85 against 96.
template <class D>
TANDEM_AVX512 void gemm_form(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0,
                             int64_t o1, float* y, int64_t ys, float* scratch, float* acc_all) {
    const int64_t group_bytes = 2 * k_pairs * w.row_bytes();
    for (int64_t o = o0; o < o1; o += 2 * k_pairs) {
        const char* next = reinterpret_cast<const char*>(w.row_ptr(o)) + group_bytes;
        run_group<D>(x, xs, rows, w, consecutive_group(o, o1), prefetcher{next, next + group_bytes}, y, ys, o0,
                     scratch, acc_all);
    }
}

#pragma GCC diagnostic pop

}  // namespace

// Not an AVX-512 function itself: its buffers are std::vectors, whose inline code must not be
// compiled for AVX-512. Grown only, per thread.
void gemm_avx512(const float* x, int64_t xs, int64_t rows, const weight_matrix& w, int64_t o0, int64_t o1, float* y,
                 int64_t ys) {
    thread_local std::vector<float> scratch;
    thread_local std::vector<float> acc;
    // 64-byte aligned: a zmm load across two cache lines costs two (std::vector's storage is
    // aligned to 16 bytes only).
    if (scratch.size() < static_cast<size_t>(k_scratch_floats + 16)) scratch.resize(static_cast<size_t>(k_scratch_floats + 16));
    if (acc.size() < static_cast<size_t>(16 * rows * k_pairs + 16)) acc.resize(static_cast<size_t>(16 * rows * k_pairs + 16));
    const auto aligned = [](std::vector<float>& v) {
        return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
    };
    float* const scratch_at = aligned(scratch);
    float* const acc_at = aligned(acc);
    switch (w.form) {
        case weight_form::f32: return gemm_form<f32_pair>(x, xs, rows, w, o0, o1, y, ys, scratch_at, acc_at);
        case weight_form::bf16: return gemm_form<bf16_pair>(x, xs, rows, w, o0, o1, y, ys, scratch_at, acc_at);
        case weight_form::f16: return gemm_form<f16_pair>(x, xs, rows, w, o0, o1, y, ys, scratch_at, acc_at);
        case weight_form::fp8_e4m3:
            return gemm_form<fp8_pair>(x, xs, rows, w, o0, o1, y, ys, scratch_at, acc_at);
        case weight_form::fp4_e2m1:
            return gemm_form<fp4_pair>(x, xs, rows, w, o0, o1, y, ys, scratch_at, acc_at);
    }
}

double gemm_fma_loop_avx512(int64_t repeats) {
    constexpr int64_t rows = 60, K = 1024;
    std::vector<float> x(static_cast<size_t>(rows * K + 16)), scratch(static_cast<size_t>(k_scratch_floats + 16)),
        acc(static_cast<size_t>(16 * k_rows * k_pairs + 16));
    // Normal magnitudes (no subnormal assists); each call restarts its accumulators at zero.
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f + 0.01f * static_cast<float>(i % 7);
    for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = 0.5f + 0.001f * static_cast<float>(i % 13);
    const auto aligned = [](std::vector<float>& v) {
        return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
    };
    float *const xs = aligned(x), *const sc = aligned(scratch), *const ac = aligned(acc);
    prefetcher none;
    for (int64_t rep = 0; rep < repeats; ++rep)
        for (int64_t r = 0; r < rows; r += k_rows) fma_block(k_rows, xs + r * K, K, sc, 0, k_chunk, ac, none, nullptr);
    volatile float keep = ac[0];  // the results are read: the loop cannot be dropped
    (void)keep;
    // 16 lanes × 2 FLOPs per FMA; each row meets each pair's run once per 8-column step.
    return 32.0 * double(repeats) * double(rows) * double(k_pairs) * double(k_chunk / 8);
}

}  // namespace tandem::cpu::detail

#endif
