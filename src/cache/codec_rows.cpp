// cache/codec_rows.cpp — decode_rows: many packed rows at once, bitwise what decode_row gives each.
//
// Why a second decoder: the forward pass reads every window row and every index row of a
// sequence at every step and layer. decode_row (codec.cpp) is the readable reference — per
// element ldexp, a branch per code — and costs ~1 µs per 512-wide row; the attention's read
// of 64 window rows per layer was 0.6 ms of a ~10 ms `small` token, all on one thread. These loops
// are branch-free integer and float operations the compiler vectorizes, over rows that lie back to
// back in a page or in the window ring.
//
// Bitwise equality with decode_row, case by case (test_codec checks every format, NaN codes and
// subnormals included):
//   bf16     the same shift of the same 16 bits.
//   e4m3     bits (sign << 24 | code << 20) are the value · 2^-120 exactly (a subnormal code lands
//            on an fp32 subnormal, also exact); · 2^120 is exact, so the product with the scale is
//            the one rounding decode_row does (code value × scale). NaN codes (0x7f, 0xff) are
//            replaced by the same quiet NaN decode_row returns before that product.
//   e2m1     magnitude m = code & 7 is 0, 0.5 (m = 1), or for m ≥ 2 the normal fp32 with bits
//            (126 << 23) + (m << 22): exponent 126 + m / 2, mantissa bit 22 = m & 1 (1, 1.5, 2, 3,
//            4, 6), which are decode_row's values; the sign is bit 3; × scale: the same product.
// Both are integer selects on the bits (a mask for the NaN code), not branches or table lookups, so
// the compiler vectorizes them: a branch on the NaN code and a table lookup kept fp8 and fp4 rows
// at 0.87 and 1.22 ns per element, now 0.41 and 0.67 (bf16 0.09; Xeon 6 VM, 4 December). At a long
// context the indexer decodes every index-K row of every sequence per CSA layer and step.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "cache/codec.h"
#include "core/check.h"

namespace tandem::cache::codec {

namespace {

constexpr float k_two_pow_120 = 1.329227995784916e36f;  // 2^120

void bf16_span(const std::byte* src, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
}

// out[i] = e4m3(src[i]) · scale, as decode_row forms it (see the file comment).
void e4m3_span(const std::byte* src, int64_t n, float scale, float* out) {
    const uint32_t nan = std::bit_cast<uint32_t>(std::numeric_limits<float>::quiet_NaN());
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t b = static_cast<uint8_t>(src[i]);
        const float v = std::bit_cast<float>(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * k_two_pow_120;
        const uint32_t is_nan = 0u - static_cast<uint32_t>((b & 0x7fu) == 0x7fu);  // all ones or zero
        out[i] = std::bit_cast<float>((nan & is_nan) | (std::bit_cast<uint32_t>(v) & ~is_nan)) * scale;
    }
}

// e2m1 code c (low nibble) → decode_row's value, from its bits (see the file comment).
inline float e2m1_value(uint32_t c) {
    const uint32_t m = c & 7u;
    const uint32_t magnitude = m >= 2u ? (126u << 23) + (m << 22) : m == 1u ? 0x3f000000u : 0u;  // 0.5f
    return std::bit_cast<float>(((c & 8u) << 28) | magnitude);
}

void decode_kv_fp8_row(const row_format& f, const std::byte* row, float* out) {
    const std::byte* scales = row + f.value_bytes + f.rope_bytes;
    for (int64_t b = 0; b < f.value_elems / f.scale_block; ++b)
        e4m3_span(row + b * f.scale_block, f.scale_block, ue8m0_to_float(static_cast<uint8_t>(scales[b])),
                  out + b * f.scale_block);
    bf16_span(row + f.value_bytes, f.rope_elems, out + f.value_elems);
}

void decode_index_fp8_row(const row_format& f, const std::byte* row, float* out) {
    float s;
    std::memcpy(&s, row + f.value_bytes, sizeof s);
    e4m3_span(row, f.dims, s, out);
}

// Elements 2i and 2i + 1 are the low and high nibble of byte i; scale blocks are even-sized.
void decode_index_fp4_row(const row_format& f, const std::byte* row, float* out) {
    const std::byte* scales = row + f.value_bytes;
    for (int64_t b = 0; b < f.dims / f.scale_block; ++b) {
        const float s = ue8m0_to_float(static_cast<uint8_t>(scales[b]));
        const int64_t e0 = b * f.scale_block;
        for (int64_t i = 0; i < f.scale_block / 2; ++i) {
            const uint32_t byte = static_cast<uint8_t>(row[e0 / 2 + i]);
            out[e0 + 2 * i] = e2m1_value(byte & 0xfu) * s;
            out[e0 + 2 * i + 1] = e2m1_value(byte >> 4) * s;
        }
    }
}

}  // namespace

void decode_rows(const row_format& f, const std::byte* rows, int64_t n, float* out) {
    TANDEM_CHECK(n >= 0);
    for (int64_t r = 0; r < n; ++r) {
        const std::byte* row = rows + r * f.bytes;
        float* o = out + r * f.dims;
        switch (f.encoding) {
            case row_encoding::kv_fp8: decode_kv_fp8_row(f, row, o); break;
            case row_encoding::index_k_fp8: decode_index_fp8_row(f, row, o); break;
            case row_encoding::index_k_fp4: decode_index_fp4_row(f, row, o); break;
            case row_encoding::kv_bf16:
            case row_encoding::index_k_bf16: bf16_span(row, f.dims, o); break;
            case row_encoding::kv_fp32:
            case row_encoding::index_k_fp32: std::memcpy(o, row, static_cast<size_t>(f.dims) * sizeof(float)); break;
        }
    }
}

}  // namespace tandem::cache::codec
