// cpu/linear_amx_decoded.cpp — FP8 and FP4 matrices on the AMX tiles (amx.h, amx_tiles.h): their
// codes decoded to bf16, exactly, on the way to the tile products linear_amx.cpp runs for BF16.
#include "cpu/amx_tiles.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <cstring>
#include <vector>

#include "cpu/decoders_avx2.h"

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be used
// uninitialized (GCC bug 105593, fixed in 13): silenced for this file, as in linear_amx.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tandem::cpu {

using namespace amx;

namespace {

// ---- FP8 and FP4 matrices: decoded into bf16 panels -------------------------------------------
//
// A stored FP8 (e4m3) or FP4 (e2m1) value times its power-of-two block scale has at most 4
// significant bits, so it is exactly a bf16 (bf16 denormals aside, as for BF16 weights): each 32
// outputs of a unit are decoded once into a bf16 panel in this thread's cache and multiplied from
// there by the same tile products as BF16 rows, so the results are those of the BF16 matrix holding
// the same values. The panel's rows lie 64 bytes more than their length apart, so a tile's 16 rows
// do not all map to one L1 set (rows of 2 KB, 4 KB, … would).

constexpr int64_t k_panel_outputs = 32;

int64_t panel_stride_words(int64_t cols) { return cols + 32; }

// The E8M0 code of (view row r, column k)'s scale — 127 (2^0) for unscaled rows — or -1 where the
// scales are fp32 (powers of two, amx_fits checked; decoded through fp32 below).
TANDEM_AMX inline int scale_code(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    if (w.scale == scale_form::none) return 127;
    return w.scale == scale_form::e8m0 ? srow[scale_col_of(w, k)] : -1;
}

// The integer routes' tables for every E8M0 code v, made once (16 KB each, L1-resident while a
// matrix decodes): looked up, not formed per 32 columns, they leave the decode four or eight vector
// operations per 32 weights.
struct code_tables {
    alignas(64) uint16_t fp4[256][32];            // ±e2m1 as bf16 · 2^(v − 127), twice over
    alignas(64) uint16_t fp8_subnormal[256][32];  // bf16(m · 2^-9) · 2^(v − 127) for m = 0 .. 7
    alignas(64) uint16_t fp8_bias[256][32];       // (v − 7) << 7: added to a normal code's exponent
};

const code_tables& tables_by_code() {
    static const code_tables tables = [] {
        code_tables t{};
        // 0, 0.5, 1, 1.5, 2, 3, 4, 6, then negated; twice, since the index's bit 4 is the next nibble's.
        const uint16_t e2m1[16] = {0,      0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0,
                                   0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0};
        const uint16_t subnormal[8] = {0, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60};
        for (int v = 0; v < 256; ++v) {
            const int shift = (v - 127) * 128;  // exponent fields move by v − 127
            for (int i = 0; i < 32; ++i) {
                const uint16_t e = e2m1[i % 16];
                if (v >= 2 && v <= 252) t.fp4[v][i] = static_cast<uint16_t>((e & 0x7fff) != 0 ? e + shift : e);
            }
            for (int m = 1; m < 8; ++m)
                if (v >= 10 && v <= 246) t.fp8_subnormal[v][m] = static_cast<uint16_t>(subnormal[m] + shift);
            for (int i = 0; i < 32; ++i) t.fp8_bias[v][i] = static_cast<uint16_t>((v - 7) * 128);
        }
        return t;
    }();
    return tables;
}

// 32 FP8 codes at p times 2^(v − 127) as bf16 words, by integer operations alone, for v in
// [10, 246] (every result then a normal bf16): a code s.eeee.mmm with e > 0 is the bf16 with
// exponent field e + v − 7 and mantissa mmm0000; a subnormal code (e = 0, value m · 2^-9) comes from
// a table of bf16(m · 2^-9) with v − 127 added to the exponent fields of m > 0.
TANDEM_AMX inline __m512i fp8_words(const uint8_t* p, const uint16_t* subnormal_table, const uint16_t* bias) {
    const __m512i codes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i normal = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(codes, 4), _mm512_set1_epi16(0x7f0)),
                                            _mm512_load_si512(bias));
    const __mmask32 subnormal = _mm512_testn_epi16_mask(codes, _mm512_set1_epi16(0x78));
    // The subnormal codes from the table (index: the low 5 bits = m).
    const __m512i magnitude = _mm512_mask_permutexvar_epi16(normal, subnormal, codes, _mm512_load_si512(subnormal_table));
    // | (code << 8) & 0x8000: the sign (0xF8 = A | (B & C)).
    return _mm512_ternarylogic_epi32(magnitude, _mm512_slli_epi16(codes, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
}

// 32 FP4 codes (16 bytes at p, element 2j in byte j's low nibble) times 2^(v − 127) as bf16 words,
// for v in [2, 252]: the table of ±e2m1 as bf16 with v − 127 added to the nonzero entries'
// exponent fields, indexed by each nibble.
TANDEM_AMX inline __m512i fp4_words(const uint8_t* p, const uint16_t* table) {
    // Byte j in dword j; | (dword << 12) puts its high nibble at the bottom of word 2j + 1.
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_permutexvar_epi16(_mm512_or_si512(bytes, _mm512_slli_epi32(bytes, 12)), _mm512_load_si512(table));
}

// The same 32 values through fp32, for any power-of-two scale s (fp32 scales, and E8M0 codes
// outside the integer routes' ranges). FP8: the code's bits placed into an fp16 as value · 2^-8
// (sign-extended byte << 7, bit 14 cleared; subnormal codes become fp16 subnormals, which the
// conversion takes exactly), widened and multiplied by s · 2^8 — the exact kernels' decode
// (pair_decoders_avx512.h), with the same factor (avx2::factor_of: s · 2^8 for FP8, s for FP4); FP4:
// a table of ±e2m1 · s. Then VCVTNE2PS2BF16: exact for these
// values, bf16 denormals flushed to zero as the tiles would.
TANDEM_AMX inline __m512i fp8_words_via_fp32(const uint8_t* p, float scale_times_256) {
    const __m512 s = _mm512_set1_ps(scale_times_256);
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(codes), 7),
                                       _mm512_set1_epi16(static_cast<short>(0xbfff)));
    const __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s);
    const __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}
TANDEM_AMX inline __m512i fp4_words_via_fp32(const uint8_t* p, float scale) {
    const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                         -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512 table = _mm512_mul_ps(values, _mm512_set1_ps(scale));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Each byte twice, then its low nibble in even lanes, its high nibble in odd ones (the permute
    // reads an index's low 4 bits only).
    const __m512i first = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes)), shifts);
    const __m512i second = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(bytes, bytes)), shifts);
    const __m512 lo = _mm512_permutexvar_ps(first, table), hi = _mm512_permutexvar_ps(second, table);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Columns [k, k + 32) of a row (its codes at row, its scales at srow) as 32 bf16 words.
TANDEM_AMX inline __m512i segment_words(const weight_matrix& w, const code_tables& t, const uint8_t* row,
                                        const uint8_t* srow, int64_t k) {
    const int v = scale_code(w, srow, k);
    if (w.form == weight_form::fp8_e4m3)
        return v >= 10 && v <= 246 ? fp8_words(row + k, t.fp8_subnormal[v], t.fp8_bias[v])
                                   : fp8_words_via_fp32(row + k, detail::avx2::factor_of(w, srow, k));
    return v >= 2 && v <= 252 ? fp4_words(row + k / 2, t.fp4[v])
                              : fp4_words_via_fp32(row + k / 2, detail::avx2::factor_of(w, srow, k));
}


// ---- Up to 16 rows (a decode step's) of FP8 / FP4 -------------------------------------------------
//
// No panel, since no other row group reuses the decoded weights: per tile of 16 outputs, column
// tile by column tile, the 16 × 32 codes are decoded into a ring of 1 KB buffers in L1, a few
// column tiles ahead of the products that read them (a tile load right after the stores it reads
// waits for them). One tile at a time, its rows one 4 KB page apart where rows are shorter (as the
// BF16 tiles): 16 row streams in flight, each page read front to back. (48 consecutive rows in
// flight — three result tiles, to overlap the products' latency — streamed FP4 experts from memory
// at 7.8 GB/s against 9.6, FP8 at 13.5 against 17.9.)

constexpr int64_t k_ring = 4;  // column tiles decoded ahead of the products

// Column tile kb of n rows (codes at rows[i], scales at srows[i]) as n rows of 32 bf16.
// Each row's codes are fetched 8 column tiles ahead (many rows advance at once, a few bytes each:
// FP4 1 row GEMV 6.2 -> 7.2 GB/s).
TANDEM_AMX inline void decode_column(const weight_matrix& w, const code_tables& t, const uint8_t* const* rows,
                                     const uint8_t* const* srows, int64_t n, int64_t kb, uint16_t* tile) {
    const int64_t ahead = (kb + 8) * (w.form == weight_form::fp8_e4m3 ? k_cols_per_tile : k_cols_per_tile / 2);
    for (int64_t i = 0; i < n; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[i] + ahead), _MM_HINT_T0);
        _mm512_store_si512(tile + i * k_cols_per_tile, segment_words(w, t, rows[i], srows[i], kb * k_cols_per_tile));
    }
}

// A column tile's decode by the general route: any scale form, any scale code.
struct any_column {
    const weight_matrix& w;
    const code_tables& t;
    const uint8_t* const* rows;
    const uint8_t* const* srows;
    int64_t n;
    TANDEM_AMX void operator()(int64_t kb, uint16_t* tile) const { decode_column(w, t, rows, srows, n, kb, tile); }
};

// The integer routes alone, for rows whose every E8M0 scale code is in their range (real
// checkpoints' always are): no per-32-column checks of the form, the scale form or the code.
// Half the time of any_column at one row. FP8 rows' codes are fetched 256 bytes ahead, once a
// line; FP4 rows' not at all — the L2 streamer follows their page-apart rows on its own. 1-row
// GEMVs from 512 MiB, K = 1024 / 2048 / 4096, two alternating rounds: FP8 at 256 bytes +4-8%
// over 512, FP4 without +9-13% (at 256 +5-7%).
template <bool Fp8>
struct fast_column {
    const code_tables& t;
    const uint8_t* const* rows;
    const uint8_t* const* srows;
    int64_t n;
    int shift;  // the scale column of column tile kb is kb >> shift
    TANDEM_AMX void operator()(int64_t kb, uint16_t* tile) const {
        constexpr int64_t bytes = Fp8 ? k_cols_per_tile : k_cols_per_tile / 2;
        const bool fetch = Fp8 && (kb & (64 / bytes - 1)) == 0;
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* p = rows[i] + kb * bytes;
            if (fetch) _mm_prefetch(reinterpret_cast<const char*>(p + 256), _MM_HINT_T0);
            const int v = srows[i][kb >> shift];
            const __m512i words = Fp8 ? fp8_words(p, t.fp8_subnormal[v], t.fp8_bias[v]) : fp4_words(p, t.fp4[v]);
            _mm512_store_si512(tile + i * k_cols_per_tile, words);
        }
    }
};

// Whether a matrix takes fast_column, and its shift.
bool fast_route(const weight_matrix& w, int* shift) {
    if (!w.amx_fast_scales) return false;
    *shift = __builtin_ctzll(static_cast<unsigned long long>(w.block_cols / k_cols_per_tile));
    return true;
}

// View row r decoded to bf16 into out[cols] (the panels of decoded_block): by the integer route
// alone where the matrix allows it (fast_route), else segment by segment.
TANDEM_AMX void decode_row(const weight_matrix& matrix, int64_t r, uint16_t* out) {
    const weight_matrix w = matrix;  // a local copy: the stores below may alias anything, not it
    const code_tables& t = tables_by_code();
    const uint8_t* row = w.row_ptr(r);
    const uint8_t* srow = detail::avx2::scale_row(w, r);
    const int64_t col_tiles = w.cols / k_cols_per_tile;
    int shift = 0;
    if (!fast_route(w, &shift)) {
        for (int64_t k = 0; k < w.cols; k += k_cols_per_tile) _mm512_storeu_si512(out + k, segment_words(w, t, row, srow, k));
    } else if (w.form == weight_form::fp8_e4m3) {
        for (int64_t kb = 0; kb < col_tiles; ++kb) {
            const int v = srow[kb >> shift];
            _mm512_storeu_si512(out + kb * k_cols_per_tile,
                                fp8_words(row + kb * k_cols_per_tile, t.fp8_subnormal[v], t.fp8_bias[v]));
        }
    } else {
        for (int64_t kb = 0; kb < col_tiles; ++kb)
            _mm512_storeu_si512(out + kb * k_cols_per_tile, fp4_words(row + kb * k_cols_per_tile / 2, t.fp4[srow[kb >> shift]]));
    }
}

// Rows [r0, r1) (at most 16) × the n ≤ 16 outputs first, first + step, …: one result tile, its row
// i (output first + step · i) stored to dst + i · dst_stride bytes.
template <class Decode>
TANDEM_AMX void decoded_tile(const x_tiles& xt, int64_t r0, int64_t n, const Decode& decode, float* dst,
                             int64_t dst_stride) {
    const int64_t col_tiles = xt.col_tiles, g = r0 / 16;
    alignas(64) uint16_t ring[k_ring][16 * k_cols_per_tile];
    if (n < 16) std::memset(ring, 0, sizeof ring);  // rows past the last output stay zero
    for (int64_t kb = 0; kb < k_ring - 1 && kb < col_tiles; ++kb) decode(kb, ring[kb]);
    _tile_zero(0);
    for (int64_t kb = 0; kb < col_tiles; ++kb) {
        const int64_t ahead = kb + k_ring - 1;
        if (ahead < col_tiles) decode(ahead, ring[ahead % k_ring]);
        _tile_loadd(4, ring[kb % k_ring], 64);
        lone_tile_products(xt, g, kb);
    }
    _tile_stored(0, dst, dst_stride);
}

TANDEM_AMX void decoded_rows(const x_tiles& xt, int64_t r0, const weight_matrix& w, const code_tables& t, int64_t first,
                             int64_t step, int64_t n, float* dst, int64_t dst_stride) {
    const uint8_t* rows[16];
    const uint8_t* srows[16];
    for (int64_t i = 0; i < n; ++i) {
        rows[i] = w.row_ptr(first + step * i);
        srows[i] = detail::avx2::scale_row(w, first + step * i);
    }
    int shift = 0;
    if (!fast_route(w, &shift)) decoded_tile(xt, r0, n, any_column{w, t, rows, srows, n}, dst, dst_stride);
    else if (w.form == weight_form::fp8_e4m3)
        decoded_tile(xt, r0, n, fast_column<true>{t, rows, srows, n, shift}, dst, dst_stride);
    else decoded_tile(xt, r0, n, fast_column<false>{t, rows, srows, n, shift}, dst, dst_stride);
}

// Whole groups of 16 · s outputs (s = rows_per_page) as s page-apart tiles, then the rest as
// consecutive rows. A group's tiles store their rows into `group` in output order (a tile store
// with a row stride of s rows), and the group goes to y 16 consecutive outputs at a time (as in
// linear_amx.cpp's tile_block: no scatter per row).
TANDEM_AMX void decoded_few_rows(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& matrix, int64_t o0,
                                 int64_t o1, float* y, int64_t ys) {
    const weight_matrix w = matrix;  // a local copy: the decode's stores may alias anything, not it
    const code_tables& t = tables_by_code();
    const int64_t s = rows_per_page(w);
    int64_t o = o0;
    if (s > 1) {
        thread_local std::vector<float> group;
        group.resize(static_cast<size_t>(16 * 16 * s));
        for (; o + 16 * s <= o1; o += 16 * s) {
            for (int64_t c = 0; c < s; ++c) decoded_rows(xt, r0, w, t, o + c, s, 16, group.data() + 16 * c, 64 * s);
            store_gathered(group.data(), o, 16 * s, r0, r1, y, ys);
        }
    }
    for (; o < o1; o += 16) {
        const int64_t n = o1 - o < 16 ? o1 - o : 16;
        alignas(64) float c[256];
        decoded_rows(xt, r0, w, t, o, 1, n, c, 64);
        store_results(c, o, n, r0, r1, y, ys);
    }
}

}  // namespace

// Rows [r0, r1) × outputs [o0, o1) of an FP8 / FP4 matrix: per 32 outputs, their rows decoded into
// the panel (rows past o1 zero), then multiplied as one pair of tiles.
TANDEM_AMX void amx::decoded_block(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
                              int64_t o1, float* y, int64_t ys) {
    if (r1 - r0 <= 16) return decoded_few_rows(xt, r0, r1, w, o0, o1, y, ys);
    const int64_t stride = panel_stride_words(w.cols);
    thread_local std::vector<uint16_t> panel;
    if (panel.size() < static_cast<size_t>(k_panel_outputs * stride))
        panel.assign(static_cast<size_t>(k_panel_outputs * stride), 0);
    for (int64_t o = o0; o < o1; o += k_panel_outputs) {
        const int64_t n = o1 - o < k_panel_outputs ? o1 - o : k_panel_outputs;
        for (int64_t i = 0; i < n; ++i) decode_row(w, o + i, panel.data() + i * stride);
        if (n < k_panel_outputs)
            std::memset(panel.data() + n * stride, 0, static_cast<size_t>((k_panel_outputs - n) * stride * 2));
        weight_tiles t;
        const int64_t outputs[2] = {n < 16 ? n : 16, n > 16 ? n - 16 : 0};
        for (int h = 0; h < (outputs[1] > 0 ? 2 : 1); ++h) {
            t.a[h] = reinterpret_cast<const uint8_t*>(panel.data() + 16 * h * stride);
            t.stride[h] = 2 * stride;
            t.first[h] = o + 16 * h;
        }
        multiply_pair(xt, r0, r1, t, outputs, y, ys);
    }
}


}  // namespace tandem::cpu

#pragma GCC diagnostic pop

#endif
