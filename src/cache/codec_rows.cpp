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
//   e2m1     a 16-entry table of decode_row's own values, × scale: the same product.
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
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t b = static_cast<uint8_t>(src[i]);
        const float v = std::bit_cast<float>(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * k_two_pow_120;
        out[i] = ((b & 0x7fu) == 0x7fu ? nan : v) * scale;
    }
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

void decode_index_fp4_row(const row_format& f, const std::byte* row, float* out) {
    float value[16];
    for (int c = 0; c < 16; ++c) value[c] = e2m1_to_float(static_cast<uint8_t>(c));
    const std::byte* scales = row + f.value_bytes;
    for (int64_t b = 0; b < f.dims / f.scale_block; ++b) {
        const float s = ue8m0_to_float(static_cast<uint8_t>(scales[b]));
        for (int64_t e = b * f.scale_block; e < (b + 1) * f.scale_block; ++e) {
            const uint8_t byte = static_cast<uint8_t>(row[e / 2]);
            out[e] = value[(e % 2 == 0) ? (byte & 0xf) : (byte >> 4)] * s;
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
