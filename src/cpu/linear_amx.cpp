// cpu/linear_amx.cpp — see amx.h: BF16 weights times x split into three bf16 parts on AMX tiles.
//
// Only functions carrying TANDEM_AMX use AVX-512 / AMX instructions; the table of exact kernels
// never calls them, and kernels.cpp reaches them only for matrices marked amx_tiles, which the
// loader marks only where amx_bf16_available().
#include "cpu/amx.h"

namespace tandem::cpu {
namespace {

constexpr int64_t k_parts = 3;           // h, m, l
constexpr int64_t k_tile_words = 256;    // 16 rows × 64 bytes
constexpr int64_t k_cols_per_tile = 32;  // bf16 per tile row

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

int64_t tile_offset(int64_t group, int64_t kb, int64_t part, int64_t col_tiles) {
    return ((group * col_tiles + kb) * k_parts + part) * k_tile_words;
}

// All eight tiles 16 rows × 64 bytes: 0–3 results (2 output tiles × 2 row groups), 4–5 weights,
// 6–7 packed x.
struct alignas(64) tile_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

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
    const int64_t col_tiles = cols / k_cols_per_tile;
    const int64_t valid = rows - g * 16 < 16 ? rows - g * 16 : 16;
    uint32_t* base = packed + tile_offset(g, 0, 0, col_tiles);
    if (valid < 16) {
        alignas(64) uint32_t words[16];
        for (int64_t m = 0; m < valid; ++m)
            for (int64_t kb = 0; kb < col_tiles; ++kb) {
                __m512i parts[k_parts];
                split32(x + (g * 16 + m) * xs + kb * k_cols_per_tile, parts);
                for (int p = 0; p < k_parts; ++p) {
                    _mm512_store_si512(words, parts[p]);
                    uint32_t* tile = base + (kb * k_parts + p) * k_tile_words;
                    for (int i = 0; i < 16; ++i) tile[16 * i + m] = words[i];
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
            uint32_t* tile = base + (kb * k_parts + p) * k_tile_words;
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
TANDEM_AMX void multiply_pair(const uint32_t* packed, int64_t r0, int64_t r1, int64_t col_tiles,
                              const weight_tiles& t, const int64_t outputs[2], float* y, int64_t ys) {
    alignas(64) float c[4][256];
    const bool second_out = t.a[1] != nullptr;
    for (int64_t r = r0; r < r1; r += 32) {
        const int64_t g = r / 16;
        const bool second_rows = r + 16 < r1;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kb = 0; kb < col_tiles; ++kb) {
            _tile_loadd(4, t.a[0] + kb * 64, t.stride[0]);
            if (second_out) _tile_loadd(5, t.a[1] + kb * 64, t.stride[1]);
            for (int64_t p = 0; p < k_parts; ++p) {
                _tile_loadd(6, packed + tile_offset(g, kb, p, col_tiles), 64);
                _tile_dpbf16ps(0, 4, 6);
                if (second_out) _tile_dpbf16ps(1, 5, 6);
                if (second_rows) {
                    _tile_loadd(7, packed + tile_offset(g + 1, kb, p, col_tiles), 64);
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

// Rows [r0, r1) × outputs [o0, o1): whole groups of 32 · s outputs (s = rows_per_page) as page-apart
// tile pairs, then the rest as consecutive rows, a last short tile from a zero-padded copy of its
// rows (a tile load reads 16 rows; the matrix may end inside one; the copy has the same bits).
TANDEM_AMX void tile_block(const uint32_t* packed, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
                           int64_t o1, float* y, int64_t ys) {
    static const tile_config config;
    _tile_loadconfig(&config);
    const int64_t col_tiles = w.cols / k_cols_per_tile, row_bytes = w.row_bytes(), s = rows_per_page(w);
    // Up to 16 rows (a decode step's), one weight tile at a time: 16 row streams in flight
    // instead of 32, which the prefetchers follow better (`small`, alternating runs: batch 1 +4%,
    // batch 4 +4–6%, batch 16 +1–5%); more rows share each x tile between the two weight tiles.
    const auto multiply = [&](const weight_tiles& t, const int64_t outputs[2]) {
        if (r1 - r0 > 16 || t.a[1] == nullptr) return multiply_pair(packed, r0, r1, col_tiles, t, outputs, y, ys);
        for (int h = 0; h < 2; ++h) {
            weight_tiles one;
            one.a[0] = t.a[h];
            one.stride[0] = t.stride[h];
            one.first[0] = t.first[h];
            one.step = t.step;
            const int64_t just[2] = {outputs[h], 0};
            multiply_pair(packed, r0, r1, col_tiles, one, just, y, ys);
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

void amx_tile(const uint32_t* packed, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0, int64_t o1,
              float* y, int64_t ys) {
    tile_block(packed, r0, r1, w, o0, o1, y, ys);
}

}  // namespace detail

}  // namespace tandem::cpu

#pragma GCC diagnostic pop

#else  // no AMX in this build

namespace tandem::cpu {
bool amx_bf16_available() { return false; }
namespace detail {
void amx_pack(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t*) {}
void amx_tile(const uint32_t*, int64_t, int64_t, const weight_matrix&, int64_t, int64_t, float*, int64_t) {}
}  // namespace detail
}  // namespace tandem::cpu

#endif

namespace tandem::cpu {

bool amx_fits(const weight_matrix& w) {
    return w.form == weight_form::bf16 && w.cols > 0 && w.cols % k_cols_per_tile == 0;
}

namespace detail {

int64_t amx_packed_words(int64_t rows, int64_t cols) {
    return (rows + 15) / 16 * (cols / k_cols_per_tile) * k_parts * k_tile_words;
}

int64_t amx_unit_outputs(const weight_matrix& w) {
    const int64_t group = 32 * rows_per_page(w);  // one page-apart pair of tiles (tile_block)
    return group > 64 ? group : 64;
}

}  // namespace detail

}  // namespace tandem::cpu
