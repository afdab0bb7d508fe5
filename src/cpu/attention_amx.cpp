// cpu/attention_amx.cpp — see attention_amx.h.
//
// Scores as Sᵀ = K · Qᵀ: the keys' bf16 rows are the A tiles as they lie (16 keys × 32 columns),
// q's parts the B tiles (16 column pairs × up to 16 heads, transposed once per row), and each
// 16 keys × heads result is transposed in registers into the heads' score rows — one transpose per
// 16 keys instead of one per 16 keys and 32 columns for S = Q · Kᵀ. Weighted sums as O = P · V: p's
// parts the A tiles (heads × 32 keys), the keys interleaved by pairs the B tiles (16 key pairs ×
// 16 columns), four result tiles sharing each A load.
#include "cpu/attention_amx.h"

#include "cpu/amx.h"
#include "cpu/amx_tiles.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_* operand and then warn that it may be used
// uninitialized (GCC bug 105593, fixed in 13): silenced for this file, as in linear_amx.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tandem::cpu {

using namespace amx;

namespace {

// Per head count g (1-16). Scores: tile 0 the result (16 keys × g), 4 the keys (16 × 32 bf16),
// 5-7 q's parts (16 column pairs × g). Sums: 0, 5, 6, 7 results (g × 16 columns), 1-3 p's parts
// (g × 32 keys), 4 the key pairs (16 × 16 columns). In static storage, as linear_amx.cpp's (GCC
// 12's _tile_loadconfig may otherwise lose a configuration filled just before it).
struct attention_configs {
    tile_config scores[17], sums[17];
    attention_configs() {
        for (int g = 1; g <= 16; ++g) {
            const auto set = [](tile_config& c, int t, int rows, int colsb) {
                c.rows[t] = static_cast<uint8_t>(rows);
                c.colsb[t] = static_cast<uint16_t>(colsb);
            };
            set(scores[g], 0, 16, 4 * g);
            set(scores[g], 4, 16, 64);
            for (int t = 5; t <= 7; ++t) set(scores[g], t, 16, 4 * g);
            for (const int t : {0, 5, 6, 7}) set(sums[g], t, g, 64);
            for (int t = 1; t <= 3; ++t) set(sums[g], t, g, 64);
            set(sums[g], 4, 16, 64);
        }
    }
};
const attention_configs& configs() {
    static const attention_configs all;
    return all;
}

// Each key's values as bf16 (exact: the caller's keys are bf16 values; a bf16 row as it is — the
// tiles take its denormals as zero, as the conversion from fp32 does), rows n .. padded zero;
// then every pair of keys interleaved column by column: pairs[(j / 2) · dim + i] holds
// (k_j[i], k_{j+1}[i]) for even j.
TANDEM_AMX void convert_keys(const key_row* keys, int64_t n, int64_t padded, int64_t dim, uint16_t* out,
                             uint16_t* pairs) {
    for (int64_t j = 0; j < n; ++j) {
        if (keys[j].bf16) {
            std::memcpy(out + j * dim, keys[j].values, static_cast<size_t>(dim) * sizeof(uint16_t));
            continue;
        }
        const float* k = static_cast<const float*>(keys[j].values);
        for (int64_t c = 0; c < dim; c += 32) {
            const __m512bh words = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + c + 16), _mm512_loadu_ps(k + c));
            _mm512_storeu_si512(out + j * dim + c, reinterpret_cast<__m512i>(words));
        }
    }
    std::memset(out + n * dim, 0, static_cast<size_t>((padded - n) * dim) * sizeof(uint16_t));
    alignas(64) static constexpr uint16_t low[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static constexpr uint16_t high[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i lo = _mm512_load_si512(low), hi = _mm512_load_si512(high);
    for (int64_t j = 0; j < padded; j += 2)
        for (int64_t c = 0; c < dim; c += 32) {
            const __m512i a = _mm512_loadu_si512(out + j * dim + c), b = _mm512_loadu_si512(out + (j + 1) * dim + c);
            uint16_t* to = pairs + (j / 2 * dim + c) * 2;
            _mm512_storeu_si512(to, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(to + 32, _mm512_permutex2var_epi16(a, hi, b));
        }
}

// q's three parts for heads [0, g) as B tiles: per 32 columns and part, 16 rows (column pairs) of g
// words (head h's pair in word h).
TANDEM_AMX void pack_q(const float* q, int64_t g, int64_t dim, uint32_t* out) {
    const __mmask16 live = static_cast<__mmask16>((1u << g) - 1u);
    for (int64_t c = 0; c < dim; c += 32) {
        __m512i by_head[k_parts][16];
        for (int64_t h = 0; h < 16; ++h) {
            if (h < g) {
                __m512i parts[k_parts];
                split32(q + h * dim + c, parts);
                for (int p = 0; p < k_parts; ++p) by_head[p][h] = parts[p];
            } else {
                for (int p = 0; p < k_parts; ++p) by_head[p][h] = _mm512_setzero_si512();
            }
        }
        for (int p = 0; p < k_parts; ++p) {
            __m512i rows[16];
            transpose16(by_head[p], rows);
            uint32_t* tile = out + ((c / 32) * k_parts + p) * 16 * g;
            for (int i = 0; i < 16; ++i) _mm512_mask_storeu_epi32(tile + i * g, live, rows[i]);
        }
    }
}

// scores[h · stride + j] for 16 keys at a time: Σ over column tiles, parts h, m, l in that order.
TANDEM_AMX void score_tiles(const uint16_t* keys, int64_t n, int64_t dim, const uint32_t* q_parts, int64_t g,
                            float* scores, int64_t stride) {
    alignas(64) float c[16 * 16] = {};  // columns past g are never stored by the tile: read, not used
    const int64_t q_stride = 4 * g;
    for (int64_t k0 = 0; k0 < n; k0 += 16) {
        _tile_zero(0);
        for (int64_t col = 0; col < dim; col += 32) {
            const uint32_t* qt = q_parts + (col / 32) * k_parts * 16 * g;
            _tile_loadd(4, keys + k0 * dim + col, dim * 2);
            _tile_loadd(5, qt, q_stride);
            _tile_dpbf16ps(0, 4, 5);
            _tile_loadd(6, qt + 16 * g, q_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, qt + 32 * g, q_stride);
            _tile_dpbf16ps(0, 4, 7);
        }
        _tile_stored(0, c, 64);
        __m512i by_key[16], by_head[16];
        for (int m = 0; m < 16; ++m) by_key[m] = _mm512_load_si512(c + 16 * m);
        transpose16(by_key, by_head);
        const int64_t valid = n - k0 < 16 ? n - k0 : 16;
        const __mmask16 live = static_cast<__mmask16>((1u << valid) - 1u);
        for (int64_t h = 0; h < g; ++h)
            _mm512_mask_storeu_ps(scores + h * stride + k0, live, _mm512_castsi512_ps(by_head[h]));
    }
}

// p's three parts for heads [0, g) as A tiles: per 32 keys and part, g rows of 16 words; keys past
// n are zero.
TANDEM_AMX void pack_p(const float* p, int64_t p_stride, int64_t g, int64_t n, int64_t padded, uint32_t* out) {
    alignas(64) float chunk[32];
    for (int64_t k0 = 0; k0 < padded; k0 += 32) {
        const int64_t valid = std::min<int64_t>(32, n - k0);  // k0 < n: padded is n rounded up to 32
        const __mmask16 first = static_cast<__mmask16>(valid >= 16 ? 0xffffu : (1u << valid) - 1u);
        const __mmask16 second = static_cast<__mmask16>(valid <= 16 ? 0u : valid >= 32 ? 0xffffu : (1u << (valid - 16)) - 1u);
        for (int64_t h = 0; h < g; ++h) {
            const float* row = p + h * p_stride + k0;
            _mm512_store_ps(chunk, _mm512_maskz_loadu_ps(first, row));
            _mm512_store_ps(chunk + 16, _mm512_maskz_loadu_ps(second, row + 16));
            __m512i parts[k_parts];
            split32(chunk, parts);
            for (int q = 0; q < k_parts; ++q) _mm512_storeu_si512(out + ((k0 / 32 * k_parts + q) * g + h) * 16, parts[q]);
        }
    }
}

// Result tile T (0, 5, 6 or 7) += p's three parts (tiles 1-3) × the key pairs of column tile `col`.
// A macro: the tile intrinsics name their registers by stringizing a literal.
#define TANDEM_SUM_PRODUCTS(T, col)                                     \
    do {                                                                \
        _tile_loadd(4, pairs + (k0 / 2 * dim + (col)) * 2, dim * 4);    \
        _tile_dpbf16ps(T, 1, 4);                                        \
        _tile_dpbf16ps(T, 2, 4);                                        \
        _tile_dpbf16ps(T, 3, 4);                                        \
    } while (0)

// out[h · out_stride + col ..] for up to four column tiles of 16 at once: Σ over 32-key tiles in
// order, parts h, m, l in that order.
template <int Tiles>
TANDEM_AMX void sum_tiles(const uint32_t* p_parts, const uint16_t* pairs, int64_t padded, int64_t dim, int64_t g,
                          int64_t col, float* out, int64_t out_stride) {
    _tile_zero(0);
    if constexpr (Tiles > 1) _tile_zero(5);
    if constexpr (Tiles > 2) _tile_zero(6);
    if constexpr (Tiles > 3) _tile_zero(7);
    for (int64_t k0 = 0; k0 < padded; k0 += 32) {
        const uint32_t* pt = p_parts + (k0 / 32) * k_parts * g * 16;
        _tile_loadd(1, pt, 64);
        _tile_loadd(2, pt + g * 16, 64);
        _tile_loadd(3, pt + 2 * g * 16, 64);
        TANDEM_SUM_PRODUCTS(0, col);
        if constexpr (Tiles > 1) TANDEM_SUM_PRODUCTS(5, col + 16);
        if constexpr (Tiles > 2) TANDEM_SUM_PRODUCTS(6, col + 32);
        if constexpr (Tiles > 3) TANDEM_SUM_PRODUCTS(7, col + 48);
    }
    const int64_t bytes = out_stride * 4;
    _tile_stored(0, out + col, bytes);
    if constexpr (Tiles > 1) _tile_stored(5, out + col + 16, bytes);
    if constexpr (Tiles > 2) _tile_stored(6, out + col + 32, bytes);
    if constexpr (Tiles > 3) _tile_stored(7, out + col + 48, bytes);
}

#undef TANDEM_SUM_PRODUCTS

TANDEM_AMX void all_scores(const uint16_t* keys, int64_t n, int64_t dim, const float* q, int64_t heads,
                           uint32_t* parts, float* scores, int64_t stride) {
    for (int64_t h0 = 0; h0 < heads; h0 += 16) {
        const int64_t g = std::min<int64_t>(16, heads - h0);
        pack_q(q + h0 * dim, g, dim, parts);
        _tile_loadconfig(&configs().scores[g]);
        score_tiles(keys, n, dim, parts, g, scores + h0 * stride, stride);
        _tile_release();
    }
}

TANDEM_AMX void all_sums(const uint16_t* pairs, int64_t n, int64_t padded, int64_t dim, const float* p,
                         int64_t p_stride, int64_t heads, uint32_t* parts, float* out, int64_t out_stride) {
    for (int64_t h0 = 0; h0 < heads; h0 += 16) {
        const int64_t g = std::min<int64_t>(16, heads - h0);
        pack_p(p + h0 * p_stride, p_stride, g, n, padded, parts);
        _tile_loadconfig(&configs().sums[g]);
        float* rows = out + h0 * out_stride;
        int64_t col = 0;
        for (; col + 64 <= dim; col += 64) sum_tiles<4>(parts, pairs, padded, dim, g, col, rows, out_stride);
        if (dim - col == 32) sum_tiles<2>(parts, pairs, padded, dim, g, col, rows, out_stride);
        _tile_release();
    }
}

}  // namespace

bool amx_attention_fits(int64_t dim) { return dim > 0 && dim % 32 == 0 && amx_bf16_available(); }

void amx_attention_row::load_keys(const key_row* keys, int64_t n, int64_t dim) {
    n_ = n;
    dim_ = dim;
    padded_ = (n + 31) / 32 * 32;
    keys_.resize(static_cast<size_t>(padded_ * dim));
    pairs_.resize(static_cast<size_t>(padded_ * dim));
    convert_keys(keys, n, padded_, dim, keys_.data(), pairs_.data());
}

void amx_attention_row::scores(const float* q, int64_t heads, float* scores, int64_t stride) {
    parts_.resize(static_cast<size_t>(dim_ / 32 * k_parts * 16 * 16));
    all_scores(keys_.data(), n_, dim_, q, heads, parts_.data(), scores, stride);
}

void amx_attention_row::weighted_sums(const float* p, int64_t p_stride, int64_t heads, float* out, int64_t out_stride) {
    parts_.resize(static_cast<size_t>(padded_ / 32 * k_parts * 16 * 16));
    all_sums(pairs_.data(), n_, padded_, dim_, p, p_stride, heads, parts_.data(), out, out_stride);
}

}  // namespace tandem::cpu

#pragma GCC diagnostic pop

#else  // no AMX in this build: amx_attention_fits() is false and the caller never gets here

namespace tandem::cpu {
bool amx_attention_fits(int64_t) { return false; }
void amx_attention_row::load_keys(const key_row*, int64_t, int64_t) {}
void amx_attention_row::scores(const float*, int64_t, float*, int64_t) {}
void amx_attention_row::weighted_sums(const float*, int64_t, int64_t, float*, int64_t) {}
}  // namespace tandem::cpu

#endif
