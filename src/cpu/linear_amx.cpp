// cpu/linear_amx.cpp — see amx.h: BF16 weights times x split into three bf16 parts on AMX tiles,
// x's packing, and amx.h's API (FP8 / FP4 weights: linear_amx_decoded.cpp).
//
// Only functions carrying TANDEM_AMX use AVX-512 / AMX instructions; the table of exact kernels
// never calls them, and kernels.cpp reaches them only for matrices marked amx_tiles, which the
// loader marks only where amx_bf16_available().
#include "cpu/amx.h"

#include <cstring>

#include "cpu/amx_tiles.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be used
// uninitialized (GCC bug 105593, fixed in 13): silenced for this file, as in tile_avx512.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tandem::cpu {

using namespace amx;

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

int64_t tokens_of(int64_t rows) { return rows < 16 ? rows : 16; }

// Every tile 16 rows: 0–3 results (2 output tiles × 2 row groups) and 6–7 packed x `tokens` columns
// (4 bytes each) wide, 4–5 weights 64 bytes. Each result element's arithmetic is the same whatever
// the width (a column is one row of x), so the bits do not depend on it.
// One configuration per width, in static storage: GCC 12's _tile_loadconfig tells the compiler it
// reads only the first 8 bytes of its operand, so a configuration filled on the stack just before
// may lose its column widths to dead-store elimination (a standalone test did: SIGILL on the first
// tile instruction).
struct tile_configs {
    tile_config by_tokens[17];
    tile_configs() {
        for (int tokens = 1; tokens <= 16; ++tokens)
            for (int t = 0; t < 8; ++t) {
                by_tokens[tokens].rows[t] = 16;
                by_tokens[tokens].colsb[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 64 : 4 * tokens);
            }
    }
};
const tile_configs& configs() {
    static const tile_configs all;
    return all;
}
TANDEM_AMX void configure_tiles(int64_t tokens) { _tile_loadconfig(&configs().by_tokens[tokens]); }
TANDEM_AMX void release_tiles() { _tile_release(); }

// For a tile of t < 16 rows (t words per column pair): register o of a part's tile holds its flat
// words 16 o .. 16 o + 15; pair[t][16 o + q] is word (16 o + q)'s column pair, row[t][16 o + m] the
// lanes whose word is row m's.
struct interleave_plans {
    alignas(64) uint32_t pair[16][16 * 15];
    __mmask16 row[16][16 * 15];
    interleave_plans() {
        for (int t = 1; t < 16; ++t)
            for (int o = 0; o < t; ++o) {
                for (int m = 0; m < 16; ++m) row[t][16 * o + m] = 0;
                for (int q = 0; q < 16; ++q) {
                    const int e = 16 * o + q;
                    pair[t][16 * o + q] = static_cast<uint32_t>(e / t);
                    row[t][16 * o + e % t] |= static_cast<__mmask16>(1u << q);
                }
            }
    }
};
const interleave_plans& interleaves() {
    static const interleave_plans plans;
    return plans;
}

// One group of 16 rows: per 32 columns, each row's three parts, then each part's 16 × 16 words
// transposed into its tile (row i = column pair i of the 16 rows). A decode step's group (fewer
// than 16 rows, its tiles just that wide) interleaves its rows' parts by permutes. The last group
// of a longer prefill, short of 16 rows, writes only its rows' columns, word by word: a result
// column depends on its own x column alone, so whatever the other columns hold (zeros, or finite
// parts of an earlier call's rows) reaches only results nobody stores.
TANDEM_AMX void pack_group(const float* x, int64_t xs, int64_t rows, int64_t cols, int64_t g, uint32_t* packed) {
    const x_tiles xt{packed, cols / k_cols_per_tile, tokens_of(rows)};
    const int64_t col_tiles = xt.col_tiles, tokens = xt.tokens, tile_words = 16 * tokens;
    const int64_t valid = rows - g * 16 < 16 ? rows - g * 16 : 16;
    uint32_t* base = const_cast<uint32_t*>(xt.at(g, 0, 0));
    if (valid == tokens && valid < 16) {
        // A decode step's rows: each part's tile is `tokens` registers of 16 words, word e being
        // column pair e / tokens of row e % tokens — one permute per row and register instead of
        // a store per word (the word-by-word copy below was ~4% of a `small` batch-16 step).
        const interleave_plans& plans = interleaves();
        const uint32_t* pairs = plans.pair[tokens];
        const __mmask16* rows_of = plans.row[tokens];
        for (int64_t kb = 0; kb < col_tiles; ++kb) {
            __m512i parts[15][k_parts];
            for (int64_t m = 0; m < valid; ++m) split32(x + (g * 16 + m) * xs + kb * k_cols_per_tile, parts[m]);
            for (int p = 0; p < k_parts; ++p) {
                uint32_t* tile = base + (kb * k_parts + p) * tile_words;
                for (int64_t o = 0; o < tokens; ++o) {
                    const __m512i pair = _mm512_load_si512(pairs + 16 * o);
                    __m512i v = _mm512_permutexvar_epi32(pair, parts[0][p]);
                    for (int64_t m = 1; m < tokens; ++m)
                        v = _mm512_mask_permutexvar_epi32(v, rows_of[o * 16 + m], pair, parts[m][p]);
                    _mm512_storeu_si512(tile + 16 * o, v);
                }
            }
        }
        return;
    }
    if (valid < 16) {  // the last group of a longer prefill: its tile keeps 16 columns
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


// Row group g of x (at most 16 rows, a decode step's) against one weight tile (16 rows `stride`
// bytes apart from `a`), over all columns; tile row n's results go to dst + n · dst_stride bytes.
// Each of the tile's 16 rows fetched 256 bytes (four column tiles) ahead. From memory (K = 1024,
// 512 MiB, alternating runs) a 1-row GEMV +8-12%, 4 rows +12-19%, 16 rows +11-17%: the L2
// streamer alone left the tiles ~10% behind the exact GEMV. Near its end the loop fetches the
// start of `next` (the tile that follows, same stride; null if none), so a tile of few column
// tiles (K = 256: 8) does not begin on cold rows.
// A function of its own, never inlined, with no AVX-512 in it: inlined into the function that
// also stored the results (multiply_pair then), which kept 512-bit constants live, the same loop streamed a 512 MiB 1-row GEMV ~10%
// slower (25.3 against 28.0 GB/s, one process, same buffer).
[[gnu::noinline]] TANDEM_AMX void lone_tile(const x_tiles& xt, int64_t g, const uint8_t* a, const uint8_t* next,
                                            int64_t stride, float* dst, int64_t dst_stride) {
    _tile_zero(0);
    constexpr int64_t ahead = 4;
    for (int64_t kb = 0; kb < xt.col_tiles; ++kb) {
        const int64_t at = kb + ahead;
        const uint8_t* fetch = at < xt.col_tiles ? a + at * 64 : next != nullptr ? next + (at - xt.col_tiles) * 64 : nullptr;
        if (fetch != nullptr && at < xt.col_tiles + ahead)
            for (int64_t i = 0; i < 16; ++i) _mm_prefetch(reinterpret_cast<const char*>(fetch + i * stride), _MM_HINT_T0);
        _tile_loadd(4, a + kb * 64, stride);
        lone_tile_products(xt, g, kb);
    }
    _tile_stored(0, dst, dst_stride);
}

// Rows [r0, r1) × outputs [o0, o1). Up to 16 rows (a decode step's): whole groups of 32 · s outputs
// (s = rows_per_page) as page-apart tiles, one weight tile at a time (16 row streams in flight
// instead of 32, which the prefetchers follow better — `small`, alternating runs: batch 1 +4%,
// batch 4 +4–6%, batch 16 +1–5%). Then, and for more rows, consecutive outputs in pairs of tiles
// (more rows share each x tile between the two), a last short tile from a zero-padded copy of its
// rows (a tile load reads 16 rows; the matrix may end inside one; the copy has the same bits).
TANDEM_AMX void tile_block(const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w, int64_t o0,
                           int64_t o1, float* y, int64_t ys) {
    const int64_t row_bytes = w.row_bytes();
    const bool decode_rows = r1 - r0 <= 16;
    int64_t o = o0;
    if (decode_rows) {
        // Each group's tiles store their rows into `group` in output order (tile c's row n is
        // output c + s · n of its half: a tile store with a row stride of s rows), and the group
        // goes to y 16 consecutive outputs at a time, one transpose and a plain store per row.
        // Storing each tile's outputs s apart straight into y took a scatter per row: a quarter of
        // a 16-row K = 256 GEMV's time (`small`, one process, with lone_tile's own function: batch
        // 16 6.4–7.7% faster, batch 1 5.4–5.9%). Values only move: the same bits.
        const int64_t s = rows_per_page(w);
        thread_local std::vector<float> group;
        group.resize(static_cast<size_t>(2 * 16 * 16 * s));
        float* half[2] = {group.data(), group.data() + 16 * 16 * s};
        for (; o + 32 * s <= o1; o += 32 * s) {
            for (int64_t c = 0; c < s; ++c)
                for (int h = 0; h < 2; ++h) {
                    // The tile after this one: the other half, the next c, or (after the group's
                    // last) the next group's first where a whole group follows.
                    const bool group_end = h == 1 && c + 1 == s;
                    const int64_t after = h == 0 ? o + 16 * s + c : group_end ? o + 32 * s : o + c + 1;
                    const uint8_t* next = !group_end || o + 64 * s <= o1 ? w.row_ptr(after) : nullptr;
                    lone_tile(xt, r0 / 16, w.row_ptr(o + 16 * s * h + c), next, s * row_bytes, half[h] + 16 * c, 64 * s);
                }
            for (int h = 0; h < 2; ++h) store_gathered(half[h], o + 16 * s * h, 16 * s, r0, r1, y, ys);
        }
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
        if (!decode_rows) {
            multiply_pair(xt, r0, r1, t, outputs, y, ys);
            continue;
        }
        for (int h = 0; h < 2 && t.a[h] != nullptr; ++h) {
            alignas(64) float c[256];
            lone_tile(xt, r0 / 16, t.a[h], nullptr, t.stride[h], c, 64);
            store_results(c, t.first[h], outputs[h], r0, r1, y, ys);
        }
    }
}

TANDEM_AMX void run_tiles(detail::amx_tile_run& run, const x_tiles& xt, int64_t r0, int64_t r1, const weight_matrix& w,
                          int64_t o0, int64_t o1, float* y, int64_t ys) {
    if (run.configured_tokens != xt.tokens) {
        configure_tiles(xt.tokens);
        run.configured_tokens = xt.tokens;
    }
    if (w.form == weight_form::bf16) tile_block(xt, r0, r1, w, o0, o1, y, ys);
    else decoded_block(xt, r0, r1, w, o0, o1, y, ys);
}

}  // namespace

// amx_tiles.h: per block of 32 rows the 2 × 2 result tiles; per column tile the weight tiles, then
// for each part (h, m, l) the rows' x tiles, each feeding two products.
TANDEM_AMX void amx::multiply_pair(const x_tiles& xt, int64_t r0, int64_t r1, const weight_tiles& t,
                                   const int64_t outputs[2], float* y, int64_t ys) {
    const bool second_out = t.a[1] != nullptr;
    alignas(64) float c[4][256];
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
        if (second_out) _tile_stored(1, c[1], 64);
        if (second_rows) _tile_stored(2, c[2], 64);
        if (second_out && second_rows) _tile_stored(3, c[3], 64);
        for (int h = 0; h < (second_out ? 2 : 1); ++h) {
            store_results(c[h], t.first[h], outputs[h], r, r1, y, ys);
            if (second_rows) store_results(c[2 + h], t.first[h], outputs[h], r + 16, r1, y, ys);
        }
    }
}

bool amx_bf16_available() {
    static const bool granted = ask_for_tiles();
    return granted;
}

namespace detail {

void amx_pack(const float* x, int64_t xs, int64_t rows, int64_t cols, int64_t g0, int64_t g1, uint32_t* packed) {
    for (int64_t g = g0; g < g1; ++g) pack_group(x, xs, rows, cols, g, packed);
}

amx_tile_run::~amx_tile_run() {
    if (configured_tokens != 0) release_tiles();
}

void amx_tile(amx_tile_run& run, const uint32_t* packed, int64_t rows, int64_t r0, int64_t r1, const weight_matrix& w,
              int64_t o0, int64_t o1, float* y, int64_t ys) {
    run_tiles(run, x_tiles{packed, w.cols / k_cols_per_tile, tokens_of(rows)}, r0, r1, w, o0, o1, y, ys);
}

}  // namespace detail

}  // namespace tandem::cpu

#pragma GCC diagnostic pop

#else  // no AMX in this build

namespace tandem::cpu {
bool amx_bf16_available() { return false; }
namespace detail {
void amx_pack(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t*) {}
amx_tile_run::~amx_tile_run() = default;
void amx_tile(amx_tile_run&, const uint32_t*, int64_t, int64_t, int64_t, const weight_matrix&, int64_t, int64_t, float*,
              int64_t) {}
}  // namespace detail
}  // namespace tandem::cpu

#endif

namespace tandem::cpu {

using namespace amx;

namespace {

// FP8 / FP4 units (decoded_block): outputs decoded once per unit, then used by this many rows.
constexpr int64_t k_decoded_unit_outputs = 64, k_decoded_unit_rows = 128;

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
