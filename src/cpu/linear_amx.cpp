// cpu/linear_amx.cpp — see amx.h: BF16 weights (FP8 / FP4 decoded to bf16 on the way) times x
// split into three bf16 parts on AMX tiles.
//
// Only functions carrying TANDEM_AMX use AVX-512 / AMX instructions; the table of exact kernels
// never calls them, and kernels.cpp reaches them only for matrices marked amx_tiles, which the
// loader marks only where amx_bf16_available().
#include "cpu/amx.h"

#include <cstring>

namespace tandem::cpu {
namespace {

constexpr int64_t k_parts = 3;           // h, m, l
constexpr int64_t k_cols_per_tile = 32;  // bf16 per tile row
// FP8 / FP4 units (decoded_block): outputs decoded once per unit, then used by this many rows.
constexpr int64_t k_decoded_unit_outputs = 64, k_decoded_unit_rows = 128;

// Rows per 4 KB page: weight tiles take rows this far apart, so each of a tile's 16 rows lies in
// its own page (1 for rows of 4 KB or more). Why: a tile load reads 16 rows at once; with 16
// consecutive rows of 2 KB a page held two interleaved streams, which the L2 streamer (it follows
// one ascending stream per page) does not run ahead on, and a 1-row decode waited on memory at
// ~60% of the exact GEMV's speed. One row per page, each page is then read front to back: rows
// c, c + s, …, c + 15 s over all columns, then c + 1, … (the exact tile's page-apart groups).
int64_t rows_per_page(const weight_matrix& w) {
    const int64_t b = w.row_bytes();
    return b > 0 && b < 4096 ? 4096 / b : 1;
}

}  // namespace
}  // namespace tandem::cpu

#if defined(__x86_64__) && defined(__GNUC__)

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#define TANDEM_AMX __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be used
// uninitialized (GCC bug 105593, fixed in 13): silenced for this file, as in tile_avx512.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tandem::cpu {

namespace {

bool ask_for_tiles() {
    // TANDEM_CPU_KERNELS=scalar / avx2 asks for those kernels alone (A/B runs, tests of the refusal).
    if (std::getenv("TANDEM_CPU_KERNELS") != nullptr) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
    if (!tile || !bf16) return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return false;  // AVX512_BF16 (packing)
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA enabled by the OS
    // Linux hands the 8 KB of tile data to a process only on request (ARCH_REQ_XCOMP_PERM).
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
}

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
int64_t tokens_of(int64_t rows) { return rows < 16 ? rows : 16; }

// Every tile 16 rows: 0–3 results (2 output tiles × 2 row groups) and 6–7 packed x `tokens` columns
// (4 bytes each) wide, 4–5 weights 64 bytes. Each result element's arithmetic is the same whatever
// the width (a column is one row of x), so the bits do not depend on it.
struct alignas(64) tile_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
// One configuration per width, in static storage: GCC 12's _tile_loadconfig tells the compiler it
// reads only the first 8 bytes of its operand, so a configuration filled on the stack just before
// may lose its column widths to dead-store elimination (a standalone test did: SIGILL on the first
// tile instruction).
struct tile_configs {
    tile_config by_tokens[17];
    tile_configs() {
        for (int tokens = 1; tokens <= 16; ++tokens)
            for (int t = 0; t < 8; ++t)
                by_tokens[tokens].colsb[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 64 : 4 * tokens);
    }
};
const tile_configs& configs() {
    static const tile_configs all;
    return all;
}
TANDEM_AMX void configure_tiles(int64_t tokens) { _tile_loadconfig(&configs().by_tokens[tokens]); }

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

// One group of 16 rows: per 32 columns, each row's three parts, then each part's 16 × 16 words
// transposed into its tile (row i = column pair i of the 16 rows). A group with fewer rows (a
// decode step's) writes only its rows' columns, word by word: a result column depends on its own
// x column alone, so whatever the other columns hold (zeros, or finite parts of an earlier call's
// rows) reaches only results nobody stores.
TANDEM_AMX void pack_group(const float* x, int64_t xs, int64_t rows, int64_t cols, int64_t g, uint32_t* packed) {
    const x_tiles xt{packed, cols / k_cols_per_tile, tokens_of(rows)};
    const int64_t col_tiles = xt.col_tiles, tokens = xt.tokens, tile_words = 16 * tokens;
    const int64_t valid = rows - g * 16 < 16 ? rows - g * 16 : 16;
    uint32_t* base = const_cast<uint32_t*>(xt.at(g, 0, 0));
    if (valid < 16) {
        alignas(64) uint32_t words[16];
        for (int64_t m = 0; m < valid; ++m)
            for (int64_t kb = 0; kb < col_tiles; ++kb) {
                __m512i parts[k_parts];
                split32(x + (g * 16 + m) * xs + kb * k_cols_per_tile, parts);
                for (int p = 0; p < k_parts; ++p) {
                    _mm512_store_si512(words, parts[p]);
                    uint32_t* tile = base + (kb * k_parts + p) * tile_words;
                    for (int i = 0; i < 16; ++i) tile[tokens * i + m] = words[i];
                }
            }
        return;
    }
    for (int64_t kb = 0; kb < col_tiles; ++kb) {
        __m512i by_row[k_parts][16];
        for (int64_t m = 0; m < 16; ++m) {
            __m512i parts[k_parts];
            split32(x + (g * 16 + m) * xs + kb * k_cols_per_tile, parts);
            for (int p = 0; p < k_parts; ++p) by_row[p][m] = parts[p];
        }
        for (int p = 0; p < k_parts; ++p) {
            __m512i tile_rows[16];
            transpose16(by_row[p], tile_rows);
            uint32_t* tile = base + (kb * k_parts + p) * tile_words;
            for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + 16 * i, tile_rows[i]);
        }
    }
}

// One pair of weight tiles: where their rows start and how far apart they are.
struct weight_tiles {
    const uint8_t* a[2] = {nullptr, nullptr};
    int64_t stride[2] = {0, 0};
    int64_t first[2] = {0, 0}, step = 1;  // output of tile row n: first[h] + step · n
};

// Results of one 16 × 16 tile into y: tile row n is output first + step · n (for n < outputs),
// column m row r + m (for r + m < r1).
TANDEM_AMX inline void store_results(const float* c, int64_t first, int64_t step, int64_t outputs, int64_t r,
                                     int64_t r1, float* y, int64_t ys) {
    const int64_t m_end = r1 - r < 16 ? r1 - r : 16;
    for (int64_t m = 0; m < m_end; ++m)
        for (int64_t n = 0; n < outputs; ++n) y[(r + m) * ys + first + step * n] = c[n * 16 + m];
}

// Rows [r0, r1) against one pair of weight tiles (the second may be absent), over all columns: per
// block of 32 rows the 2 × 2 result tiles; per column tile the weight tiles, then for each part
// (h, m, l) the rows' x tiles, each feeding two products. Every element's products run in one
// order — column tile by column tile, h, m, l — whatever the tiles, rows or thread.
TANDEM_AMX void multiply_pair(const x_tiles& xt, int64_t r0, int64_t r1, const weight_tiles& t,
                              const int64_t outputs[2], float* y, int64_t ys) {
    alignas(64) float c[4][256];
    const bool second_out = t.a[1] != nullptr;
    for (int64_t r = r0; r < r1; r += 32) {
        const int64_t g = r / 16;
        const bool second_rows = r + 16 < r1;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kb = 0; kb < xt.col_tiles; ++kb) {
            _tile_loadd(4, t.a[0] + kb * 64, t.stride[0]);
            if (second_out) _tile_loadd(5, t.a[1] + kb * 64, t.stride[1]);
            for (int64_t p = 0; p < k_parts; ++p) {
                _tile_loadd(6, xt.at(g, kb, p), xt.stride());
                _tile_dpbf16ps(0, 4, 6);
                if (second_out) _tile_dpbf16ps(1, 5, 6);
                if (second_rows) {
                    _tile_loadd(7, xt.at(g + 1, kb, p), xt.stride());
                    _tile_dpbf16ps(2, 4, 7);
                    if (second_out) _tile_dpbf16ps(3, 5, 7);
                }
            }
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        for (int h = 0; h < (second_out ? 2 : 1); ++h) {
            store_results(c[h], t.first[h], t.step, outputs[h], r, r1, y, ys);
            if (second_rows) store_results(c[2 + h], t.first[h], t.step, outputs[h], r + 16, r1, y, ys);
        }
    }
}

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

// The scale of (view row r, column k) where the row's scales start at srow.
TANDEM_AMX inline float scale_for(const weight_matrix& w, const uint8_t* srow, int64_t k) {
    if (w.scale == scale_form::none) return 1.0f;
    if (w.scale == scale_form::e8m0) return decode_e8m0(srow[scale_col_of(w, k)]);
    float s;
    std::memcpy(&s, srow + 4 * scale_col_of(w, k), 4);
    return s;
}

TANDEM_AMX inline const uint8_t* scale_row_of(const weight_matrix& w, int64_t r) {
    if (w.scale == scale_form::none) return nullptr;
    return w.scales + (w.row0 + r) / w.block_rows * w.scale_cols * (w.scale == scale_form::e8m0 ? 1 : 4);
}

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
// (pair_decoders_avx512.h); FP4: a table of ±e2m1 · s. Then VCVTNE2PS2BF16: exact for these
// values, bf16 denormals flushed to zero as the tiles would.
TANDEM_AMX inline __m512i fp8_words_via_fp32(const uint8_t* p, float scale) {
    const __m512 s = _mm512_set1_ps(scale * 256.0f);
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
                                   : fp8_words_via_fp32(row + k, scale_for(w, srow, k));
    return v >= 2 && v <= 252 ? fp4_words(row + k / 2, t.fp4[v]) : fp4_words_via_fp32(row + k / 2, scale_for(w, srow, k));
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
// Half the time of any_column at one row. Each row's codes are fetched 512 bytes ahead, once a line.
template <bool Fp8>
struct fast_column {
    const code_tables& t;
    const uint8_t* const* rows;
    const uint8_t* const* srows;
    int64_t n;
    int shift;  // the scale column of column tile kb is kb >> shift
    TANDEM_AMX void operator()(int64_t kb, uint16_t* tile) const {
        constexpr int64_t bytes = Fp8 ? k_cols_per_tile : k_cols_per_tile / 2;
        const bool fetch = (kb & (64 / bytes - 1)) == 0;
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* p = rows[i] + kb * bytes;
            if (fetch) _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
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
    const uint8_t* srow = scale_row_of(w, r);
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

// Rows [r0, r1) (at most 16) × the n ≤ 16 outputs first, first + step, …: one result tile.
template <class Decode>
TANDEM_AMX void decoded_tile(const x_tiles& xt, int64_t r0, int64_t r1, int64_t first, int64_t step, int64_t n,
                             const Decode& decode, float* y, int64_t ys) {
    const int64_t col_tiles = xt.col_tiles, g = r0 / 16;
    alignas(64) uint16_t ring[k_ring][16 * k_cols_per_tile];
    if (n < 16) std::memset(ring, 0, sizeof ring);  // rows past the last output stay zero
    for (int64_t kb = 0; kb < k_ring - 1 && kb < col_tiles; ++kb) decode(kb, ring[kb]);
    _tile_zero(0);
    for (int64_t kb = 0; kb < col_tiles; ++kb) {
        const int64_t ahead = kb + k_ring - 1;
        if (ahead < col_tiles) decode(ahead, ring[ahead % k_ring]);
        _tile_loadd(4, ring[kb % k_ring], 64);
        _tile_loadd(6, xt.at(g, kb, 0), xt.stride());
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, xt.at(g, kb, 1), xt.stride());
        _tile_dpbf16ps(0, 4, 7);
        _tile_loadd(6, xt.at(g, kb, 2), xt.stride());
        _tile_dpbf16ps(0, 4, 6);
    }
    alignas(64) float c[256];
    _tile_stored(0, c, 64);
    store_results(c, first, step, n, r0, r1, y, ys);
}

TANDEM_AMX void decoded_rows(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, const code_tables& t,
                             int64_t first, int64_t step, int64_t n, float* y, int64_t ys) {
    const uint8_t* rows[16];
    const uint8_t* srows[16];
    for (int64_t i = 0; i < n; ++i) {
        rows[i] = w.row_ptr(first + step * i);
        srows[i] = scale_row_of(w, first + step * i);
    }
    int shift = 0;
    if (!fast_route(w, &shift)) decoded_tile(xt, r0, r1, first, step, n, any_column{w, t, rows, srows, n}, y, ys);
    else if (w.form == weight_form::fp8_e4m3)
        decoded_tile(xt, r0, r1, first, step, n, fast_column<true>{t, rows, srows, n, shift}, y, ys);
    else decoded_tile(xt, r0, r1, first, step, n, fast_column<false>{t, rows, srows, n, shift}, y, ys);
}

// Whole groups of 16 · s outputs (s = rows_per_page) as s page-apart tiles, then the rest as
// consecutive rows.
TANDEM_AMX void decoded_few_rows(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& matrix, int64_t o0,
                                 int64_t o1, float* y, int64_t ys) {
    const weight_matrix w = matrix;  // a local copy: the decode's stores may alias anything, not it
    const code_tables& t = tables_by_code();
    const int64_t s = rows_per_page(w);
    int64_t o = o0;
    for (; s > 1 && o + 16 * s <= o1; o += 16 * s)
        for (int64_t c = 0; c < s; ++c) decoded_rows(xt, r0, r1, w, t, o + c, s, 16, y, ys);
    for (; o < o1; o += 16) decoded_rows(xt, r0, r1, w, t, o, 1, o1 - o < 16 ? o1 - o : 16, y, ys);
}

// Rows [r0, r1) × outputs [o0, o1) of an FP8 / FP4 matrix: per 32 outputs, their rows decoded into
// the panel (rows past o1 zero), then multiplied as one pair of tiles.
TANDEM_AMX void decoded_block(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
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

// Rows [r0, r1) × outputs [o0, o1): whole groups of 32 · s outputs (s = rows_per_page) as page-apart
// tile pairs, then the rest as consecutive rows, a last short tile from a zero-padded copy of its
// rows (a tile load reads 16 rows; the matrix may end inside one; the copy has the same bits).
TANDEM_AMX void tile_block(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
                           int64_t o1, float* y, int64_t ys) {
    const int64_t row_bytes = w.row_bytes(), s = rows_per_page(w);
    // Up to 16 rows (a decode step's), one weight tile at a time: 16 row streams in flight
    // instead of 32, which the prefetchers follow better (`small`, alternating runs: batch 1 +4%,
    // batch 4 +4–6%, batch 16 +1–5%); more rows share each x tile between the two weight tiles.
    const auto multiply = [&](const weight_tiles& t, const int64_t outputs[2]) {
        if (r1 - r0 > 16 || t.a[1] == nullptr) return multiply_pair(xt, r0, r1, t, outputs, y, ys);
        for (int h = 0; h < 2; ++h) {
            weight_tiles one;
            one.a[0] = t.a[h];
            one.stride[0] = t.stride[h];
            one.first[0] = t.first[h];
            one.step = t.step;
            const int64_t just[2] = {outputs[h], 0};
            multiply_pair(xt, r0, r1, one, just, y, ys);
        }
    };
    int64_t o = o0;
    for (; o + 32 * s <= o1; o += 32 * s)
        for (int64_t c = 0; c < s; ++c) {
            weight_tiles t;
            t.step = s;
            for (int h = 0; h < 2; ++h) {
                t.first[h] = o + 16 * s * h + c;
                t.a[h] = w.row_ptr(t.first[h]);
                t.stride[h] = s * row_bytes;
            }
            const int64_t outputs[2] = {16, 16};
            multiply(t, outputs);
        }
    thread_local std::vector<uint16_t> padded;
    for (; o < o1; o += 32) {
        weight_tiles t;
        int64_t outputs[2] = {0, 0};
        for (int h = 0; h < 2; ++h) {
            const int64_t at = o + 16 * h;
            if (at >= o1) break;
            t.first[h] = at;
            outputs[h] = o1 - at < 16 ? o1 - at : 16;
            t.stride[h] = row_bytes;
            t.a[h] = w.row_ptr(at);
            if (outputs[h] < 16) {
                padded.assign(static_cast<size_t>(16 * w.cols), 0);
                std::memcpy(padded.data(), w.row_ptr(at), static_cast<size_t>(outputs[h] * row_bytes));
                t.a[h] = reinterpret_cast<const uint8_t*>(padded.data());
                t.stride[h] = 2 * w.cols;
            }
        }
        multiply(t, outputs);
    }
}

TANDEM_AMX void run_tiles(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0, int64_t o1,
                          float* y, int64_t ys) {
    configure_tiles(xt.tokens);
    if (w.form == weight_form::bf16) tile_block(xt, r0, r1, w, o0, o1, y, ys);
    else decoded_block(xt, r0, r1, w, o0, o1, y, ys);
    // Tiles back in their initial state: a context switch then saves and restores no tile data.
    _tile_release();
}

}  // namespace

bool amx_bf16_available() {
    static const bool granted = ask_for_tiles();
    return granted;
}

namespace detail {

void amx_pack(const float* x, int64_t xs, int64_t rows, int64_t cols, int64_t g0, int64_t g1, uint32_t* packed) {
    for (int64_t g = g0; g < g1; ++g) pack_group(x, xs, rows, cols, g, packed);
}

void amx_tile(const uint32_t* packed, int64_t rows, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
              int64_t o1, float* y, int64_t ys) {
    run_tiles(x_tiles{packed, w.cols / k_cols_per_tile, tokens_of(rows)}, r0, r1, w, o0, o1, y, ys);
}

}  // namespace detail

}  // namespace tandem::cpu

#pragma GCC diagnostic pop

#else  // no AMX in this build

namespace tandem::cpu {
bool amx_bf16_available() { return false; }
namespace detail {
void amx_pack(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t*) {}
void amx_tile(const uint32_t*, int64_t, int64_t, int64_t, const weight_matrix&, int64_t, int64_t, float*, int64_t) {}
}  // namespace detail
}  // namespace tandem::cpu

#endif

namespace tandem::cpu {

namespace {

// Every fp32 scale the view uses is ±2^e or 0 (a decoded value then stays a 4-bit significand).
bool scales_exact_in_bf16(const weight_matrix& w) {
    if (w.scale != scale_form::f32) return true;
    const int64_t first = w.row0 / w.block_rows, last = (w.row0 + w.rows - 1) / w.block_rows;
    for (int64_t i = first * w.scale_cols; i < (last + 1) * w.scale_cols; ++i) {
        uint32_t bits;
        std::memcpy(&bits, w.scales + 4 * i, 4);
        const uint32_t exponent = (bits >> 23) & 0xffu;
        const bool zero = (bits & 0x7fffffffu) == 0, power_of_two = (bits & 0x7fffffu) == 0 && exponent != 0 && exponent != 0xffu;
        if (!zero && !power_of_two) return false;
    }
    return true;
}

// Every E8M0 scale code the view uses lies in [lo, hi].
bool scale_codes_within(const weight_matrix& w, int lo, int hi) {
    const int64_t first = w.row0 / w.block_rows, last = (w.row0 + w.rows - 1) / w.block_rows;
    const int64_t used = (w.cols + w.block_cols - 1) / w.block_cols;
    for (int64_t r = first; r <= last; ++r)
        for (int64_t c = 0; c < used; ++c) {
            const uint8_t v = w.scales[r * w.scale_cols + c];
            if (v < lo || v > hi) return false;
        }
    return true;
}

}  // namespace

void mark_for_tiles(weight_matrix& w) {
    w.amx_tiles = true;
    const int64_t per = w.block_cols / k_cols_per_tile;  // scale columns per tile row: a power of two
    w.amx_fast_scales = w.form != weight_form::bf16 && w.scale == scale_form::e8m0 && per >= 1 && (per & (per - 1)) == 0 &&
                        (w.form == weight_form::fp8_e4m3 ? scale_codes_within(w, 10, 246) : scale_codes_within(w, 2, 252));
}

bool amx_fits(const weight_matrix& w) {
    if (w.cols <= 0 || w.cols % k_cols_per_tile != 0) return false;
    if (w.form == weight_form::bf16) return true;
    if (w.form != weight_form::fp8_e4m3 && w.form != weight_form::fp4_e2m1) return false;
    // A tile row's 32 columns must share one scale.
    if (w.scale != scale_form::none && w.block_cols % k_cols_per_tile != 0) return false;
    return scales_exact_in_bf16(w);
}

namespace detail {

int64_t amx_unit_rows(const weight_matrix& w) { return w.form == weight_form::bf16 ? 64 : k_decoded_unit_rows; }

int64_t amx_packed_words(int64_t rows, int64_t cols) {
    // Up to 16 rows: tiles of just those rows (x_tiles).
    return (rows + 15) / 16 * (cols / k_cols_per_tile) * k_parts * 16 * (rows < 16 ? rows : 16);
}

int64_t amx_unit_outputs(const weight_matrix& w) {
    if (w.form != weight_form::bf16) {  // whole page-apart groups (decoded_few_rows)
        const int64_t group = 16 * rows_per_page(w);
        return group > k_decoded_unit_outputs ? group : k_decoded_unit_outputs;
    }
    const int64_t group = 32 * rows_per_page(w);  // one page-apart pair of tiles (tile_block)
    return group > 64 ? group : 64;
}

}  // namespace detail

}  // namespace tandem::cpu
