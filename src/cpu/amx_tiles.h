// cpu/amx_tiles.h — (cpu/ internal) what the AMX translation units share: linear_amx.cpp (BF16
// tiles, x packing, the API of amx.h), linear_amx_decoded.cpp (FP8 / FP4 decoded to bf16) and
// attention_amx.cpp (attention's products). The tile geometry, the page-apart row rule, packed x's
// layout, the split of fp32 values into three bf16 parts, the in-register 16 × 16 transpose and the
// product of a pair of weight tiles; the AMX part only inside their x86-64 + GCC guard.
#pragma once

#include <cstdint>

#include "cpu/weight_matrix.h"

namespace tandem::cpu::amx {

constexpr int64_t k_parts = 3;           // h, m, l
constexpr int64_t k_cols_per_tile = 32;  // bf16 per tile row

// Rows per 4 KB page: weight tiles take rows this far apart, so each of a tile's 16 rows lies in
// its own page (1 for rows of 4 KB or more). Why: a tile load reads 16 rows at once; with 16
// consecutive rows of 2 KB a page held two interleaved streams, which the L2 streamer (it follows
// one ascending stream per page) does not run ahead on, and a 1-row decode waited on memory at
// ~60% of the exact GEMV's speed. One row per page, each page is then read front to back: rows
// c, c + s, …, c + 15 s over all columns, then c + 1, … (the exact tile's page-apart groups).
inline int64_t rows_per_page(const weight_matrix& w) {
    const int64_t b = w.row_bytes();
    return b > 0 && b < 4096 ? 4096 / b : 1;
}

}  // namespace tandem::cpu::amx

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be used
// uninitialized (GCC bug 105593, fixed in 13) wherever transpose16 is inlined: silenced for these
// helpers, as in the files that include them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// fma and f16c for the AVX2 scale helpers the decode reuses (decoders_avx2.h); every AMX CPU has them.
#define TANDEM_AMX __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16,fma,f16c")))

namespace tandem::cpu::amx {

// LDTILECFG's 64-byte operand: palette 1 and, per tile register, its rows and bytes per row (0:
// unused). Configurations live in static storage (see linear_amx.cpp's tile_configs).
struct alignas(64) tile_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// x packed for the tiles (amx_pack): per group of 16 rows, per 32 columns, per part, a tile of 16
// column pairs × `tokens` rows of x — 16, or a job's rows where it has fewer (a decode step's), so a
// 1-row GEMV reads 64 bytes of x per 32 columns and part instead of a whole 1 KB tile.
struct x_tiles {
    const uint32_t* words;
    int64_t col_tiles, tokens;
    const uint32_t* at(int64_t group, int64_t kb, int64_t part) const {
        return words + ((group * col_tiles + kb) * k_parts + part) * 16 * tokens;
    }
    int64_t stride() const { return 4 * tokens; }
};

// One pair of weight tiles: where their rows start and how far apart they are.
struct weight_tiles {
    const uint8_t* a[2] = {nullptr, nullptr};
    int64_t stride[2] = {0, 0};
    int64_t first[2] = {0, 0};  // output of tile row n: first[h] + n
};

// The 16 × 16 words of r transposed in registers: rows out[i] = column i of r.
TANDEM_AMX inline void transpose16(const __m512i r[16], __m512i out[16]) {
    __m512i a[16], b[16];
    for (int j = 0; j < 8; ++j) {
        a[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        a[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    for (int j = 0; j < 4; ++j) {  // per 128-bit lane L, b[4j + c] = column 4L + c of rows 4j..4j+3
        b[4 * j] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    for (int c = 0; c < 4; ++c) {
        const __m512i even0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88), odd0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xdd);
        const __m512i even1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88),
                      odd1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xdd);
        out[c] = _mm512_shuffle_i32x4(even0, even1, 0x88);
        out[8 + c] = _mm512_shuffle_i32x4(even0, even1, 0xdd);
        out[4 + c] = _mm512_shuffle_i32x4(odd0, odd1, 0x88);
        out[12 + c] = _mm512_shuffle_i32x4(odd0, odd1, 0xdd);
    }
}

// The three parts of 32 values, each as 16 words of two bf16 (column 2i low, 2i + 1 high), by
// VCVTNE2PS2BF16 (round to nearest even; NaN stays NaN; like the tiles, it takes fp32 denormals as
// zero — a part that small is below what TDPBF16PS adds anyway).
TANDEM_AMX inline void split32(const float* x, __m512i out[k_parts]) {
    __m512 rest[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (int p = 0; p < k_parts; ++p) {
        const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(rest[1], rest[0]));
        out[p] = words;
        if (p + 1 == k_parts) break;
        for (int h = 0; h < 2; ++h) {
            const __m256i half = h == 0 ? _mm512_castsi512_si256(words) : _mm512_extracti64x4_epi64(words, 1);
            const __m512 taken = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
            // x − part is exact (Sterbenz: the part is x rounded, same sign, within a factor 2). A
            // non-finite part (inf, NaN, or a value past bf16's range) leaves nothing to add.
            const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(taken), inf, _CMP_LT_OQ);
            rest[h] = _mm512_maskz_sub_ps(finite, rest[h], taken);
        }
    }
}

// Results of one 16 × 16 tile into y: tile row n is output first + n (for n < outputs), column m
// row r + m (for r + m < r1). From 4 rows on, the tile is transposed in registers and each row's
// outputs go out in one masked store: element by element, the copy was a third of a K = 256
// prefill linear's time. Page-apart tiles (a decode step's) first gather their rows in output
// order (tile_block, decoded_few_rows). The values are only moved.
TANDEM_AMX inline void store_results(const float* c, int64_t first, int64_t outputs, int64_t r, int64_t r1, float* y,
                                     int64_t ys) {
    const int64_t m_end = r1 - r < 16 ? r1 - r : 16;
    if (m_end < 4) {
        for (int64_t m = 0; m < m_end; ++m)
            for (int64_t n = 0; n < outputs; ++n) y[(r + m) * ys + first + n] = c[n * 16 + m];
        return;
    }
    __m512i by_output[16], by_row[16];
    for (int n = 0; n < 16; ++n) by_output[n] = _mm512_loadu_si512(c + 16 * n);
    transpose16(by_output, by_row);
    const __mmask16 live = outputs >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << outputs) - 1u);
    for (int64_t m = 0; m < m_end; ++m)
        _mm512_mask_storeu_ps(y + (r + m) * ys + first, live, _mm512_castsi512_ps(by_row[m]));
}

// A page-apart group's results gathered in output order — n outputs from first (a multiple of 16),
// each a row of 16 floats (one per row of x) — into y, 16 outputs at a time.
TANDEM_AMX inline void store_gathered(const float* rows, int64_t first, int64_t n, int64_t r, int64_t r1, float* y,
                                      int64_t ys) {
    for (int64_t j = 0; j < n; j += 16) store_results(rows + 16 * j, first + j, 16, r, r1, y, ys);
}

// tmm0 += the weight tile in tmm4 × x's three parts (h, m, l) of row group g, column tile kb — a
// lone weight tile's products (at most 16 rows: tiles 1–3 are free). Each part has its own tile
// register, so no load waits for the product before it.
TANDEM_AMX inline void lone_tile_products(const x_tiles& xt, int64_t g, int64_t kb) {
    _tile_loadd(6, xt.at(g, kb, 0), xt.stride());
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, xt.at(g, kb, 1), xt.stride());
    _tile_dpbf16ps(0, 4, 7);
    _tile_loadd(1, xt.at(g, kb, 2), xt.stride());
    _tile_dpbf16ps(0, 4, 1);
}

// Rows [r0, r1) against one pair of weight tiles (the second may be absent), over all columns: per
// block of 32 rows the 2 × 2 result tiles; per column tile the weight tiles, then for each part
// (h, m, l) the rows' x tiles, each feeding two products. A decode step's rows (at most 16) take
// one weight tile at a time instead (linear_amx.cpp's lone_tile, decoded_tile; the three parts in
// three tile registers, lone_tile_products). Every element's products run in one order — column
// tile by column tile, h, m, l — whatever the tiles, rows or thread.
// Defined in linear_amx.cpp.
TANDEM_AMX void multiply_pair(const x_tiles& xt, int64_t r0, int64_t r1, const weight_tiles& t,
                              const int64_t outputs[2], float* y, int64_t ys);

// Rows [r0, r1) × outputs [o0, o1) of an FP8 / FP4 matrix amx_fits() accepts, its codes decoded
// to bf16 on the way (linear_amx_decoded.cpp). Tiles configured by the caller.
TANDEM_AMX void decoded_block(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
                              int64_t o1, float* y, int64_t ys);

}  // namespace tandem::cpu::amx

#pragma GCC diagnostic pop

#endif
