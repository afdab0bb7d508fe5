// cache/codec.cpp — Scalar reference codecs. Clarity over speed: these define the bytes.
#include "cache/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace tandem::cache::codec {

namespace {

constexpr float k_e4m3_max = 448.0f;
constexpr float k_e2m1_max = 6.0f;
constexpr int k_e4m3_exp_bias = 7;
constexpr int k_e4m3_min_normal_exp = -6;  // 2^-6; subnormals are m/8 * 2^-6
constexpr int k_ue8m0_bias = 127;
// amax floors of the official simulations (dsv4-model.md §6.2 / §6.3).
constexpr float k_fp8_amax_floor = 1e-4f;
const float k_fp4_amax_floor = 6.0f * std::ldexp(1.0f, -126);
// SGLang's per-row fp8 index-K scale floor (only matters for all-zero rows).
constexpr float k_index_fp8_amax_floor = 1e-8f;
// The e2m1 magnitudes by 3-bit code (sign is bit 3).
constexpr float k_e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

void put_f32(std::byte* p, float v) { std::memcpy(p, &v, sizeof v); }
float get_f32(const std::byte* p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
void put_bf16(std::byte* p, float v) {
    const uint16_t b = float_to_bf16(v);
    std::memcpy(p, &b, sizeof b);
}
float get_bf16(const std::byte* p) {
    uint16_t b;
    std::memcpy(&b, p, sizeof b);
    return bf16_to_float(b);
}

float block_amax(std::span<const float> x) {
    float a = 0.0f;
    for (float v : x) a = std::max(a, std::fabs(v));
    return a;
}

}  // namespace

uint16_t float_to_bf16(float x) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint8_t float_to_e4m3(float x) {
    if (std::isnan(x)) return 0x7f;
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const float a = std::min(std::fabs(x), k_e4m3_max);  // saturate like the official clamp
    if (a < std::ldexp(1.0f, k_e4m3_min_normal_exp)) {
        // Subnormal: steps of 2^-9; code 8 rounds up into the smallest normal, which is code 8.
        const float q = std::nearbyint(std::ldexp(a, -(k_e4m3_min_normal_exp - 3)));
        return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
    }
    int e = 0;
    const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    int exp = e - 1;                    // a = (2m) * 2^exp, 2m in [1, 2)
    int q = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
    if (q == 8) {
        q = 0;
        ++exp;
    }
    return static_cast<uint8_t>(sign | ((exp + k_e4m3_exp_bias) << 3) | q);
}

float e4m3_to_float(uint8_t b) {
    const int exp = (b >> 3) & 0xf;
    const int man = b & 0x7;
    const float sign = (b & 0x80) ? -1.0f : 1.0f;
    if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exp == 0) return sign * std::ldexp(static_cast<float>(man), k_e4m3_min_normal_exp - 3);
    return sign * std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - k_e4m3_exp_bias);
}

uint8_t float_to_e2m1(float x) {
    if (std::isnan(x)) return 0;
    const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
    const float a = std::min(std::fabs(x), k_e2m1_max);
    uint8_t best = 0;
    for (uint8_t c = 1; c < 8; ++c) {
        const float d = std::fabs(a - k_e2m1_values[c]);
        const float dbest = std::fabs(a - k_e2m1_values[best]);
        if (d < dbest || (d == dbest && (c & 1) == 0)) best = c;  // ties to even code
    }
    return static_cast<uint8_t>(sign | best);
}

float e2m1_to_float(uint8_t code) {
    const float v = k_e2m1_values[code & 0x7];
    return (code & 0x8) ? -v : v;
}

float ue8m0_to_float(uint8_t b) { return std::ldexp(1.0f, static_cast<int>(b) - k_ue8m0_bias); }

uint8_t float_to_ue8m0(float pow2_scale) {
    int e = 0;
    const float m = std::frexp(pow2_scale, &e);
    TANDEM_CHECK_MSG(m == 0.5f, "ue8m0 scales are powers of two");
    const int b = e - 1 + k_ue8m0_bias;
    TANDEM_CHECK(b >= 0 && b <= 254);
    return static_cast<uint8_t>(b);
}

float pow2_block_scale(float amax, float amax_floor, float max_code) {
    const float r = std::max(amax, amax_floor) / max_code;
    // ceil(log2(r)) from the bits, exact (the official kernels' fast_log2_ceil does the same).
    int e = 0;
    const float m = std::frexp(r, &e);  // r = m * 2^e, m in [0.5, 1)
    return m == 0.5f ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
}

void fp8_qdq_blocks(std::span<float> x, int64_t block) {
    TANDEM_CHECK(block > 0 && static_cast<int64_t>(x.size()) % block == 0);
    for (size_t b0 = 0; b0 < x.size(); b0 += static_cast<size_t>(block)) {
        std::span<float> blk = x.subspan(b0, static_cast<size_t>(block));
        const float s = pow2_block_scale(block_amax(blk), k_fp8_amax_floor, k_e4m3_max);
        for (float& v : blk) v = e4m3_to_float(float_to_e4m3(v / s)) * s;
    }
}

void fp4_qdq_blocks(std::span<float> x, int64_t block) {
    TANDEM_CHECK(block > 0 && static_cast<int64_t>(x.size()) % block == 0);
    for (size_t b0 = 0; b0 < x.size(); b0 += static_cast<size_t>(block)) {
        std::span<float> blk = x.subspan(b0, static_cast<size_t>(block));
        const float s = pow2_block_scale(block_amax(blk), k_fp4_amax_floor, k_e2m1_max);
        for (float& v : blk) v = e2m1_to_float(float_to_e2m1(v / s)) * s;
    }
}

// --- Row codecs ---------------------------------------------------------------------------------

namespace {

void encode_kv_fp8(const row_format& f, std::span<const float> v, std::byte* row) {
    std::byte* scales = row + f.value_bytes + f.rope_bytes;
    for (int64_t b = 0; b < f.value_elems / f.scale_block; ++b) {
        std::span<const float> blk = v.subspan(static_cast<size_t>(b * f.scale_block),
                                               static_cast<size_t>(f.scale_block));
        const float s = pow2_block_scale(block_amax(blk), k_fp8_amax_floor, k_e4m3_max);
        for (int64_t i = 0; i < f.scale_block; ++i) {
            row[b * f.scale_block + i] = std::byte{float_to_e4m3(blk[static_cast<size_t>(i)] / s)};
        }
        scales[b] = std::byte{float_to_ue8m0(s)};
    }
    for (int64_t i = 0; i < f.rope_elems; ++i) {
        put_bf16(row + f.value_bytes + 2 * i, v[static_cast<size_t>(f.value_elems + i)]);
    }
    std::memset(scales + f.scale_bytes, 0, static_cast<size_t>(f.pad_bytes));
}

void decode_kv_fp8(const row_format& f, const std::byte* row, std::span<float> v) {
    const std::byte* scales = row + f.value_bytes + f.rope_bytes;
    for (int64_t i = 0; i < f.value_elems; ++i) {
        const float s = ue8m0_to_float(static_cast<uint8_t>(scales[i / f.scale_block]));
        v[static_cast<size_t>(i)] = e4m3_to_float(static_cast<uint8_t>(row[i])) * s;
    }
    for (int64_t i = 0; i < f.rope_elems; ++i) {
        v[static_cast<size_t>(f.value_elems + i)] = get_bf16(row + f.value_bytes + 2 * i);
    }
}

void encode_index_fp8(const row_format& f, std::span<const float> v, std::byte* row) {
    const float s = std::max(block_amax(v), k_index_fp8_amax_floor) / k_e4m3_max;
    for (int64_t i = 0; i < f.dims; ++i) {
        row[i] = std::byte{float_to_e4m3(v[static_cast<size_t>(i)] / s)};
    }
    put_f32(row + f.value_bytes, s);
}

void decode_index_fp8(const row_format& f, const std::byte* row, std::span<float> v) {
    const float s = get_f32(row + f.value_bytes);
    for (int64_t i = 0; i < f.dims; ++i) {
        v[static_cast<size_t>(i)] = e4m3_to_float(static_cast<uint8_t>(row[i])) * s;
    }
}

void encode_index_fp4(const row_format& f, std::span<const float> v, std::byte* row) {
    std::byte* scales = row + f.value_bytes;
    std::memset(row, 0, static_cast<size_t>(f.value_bytes));
    for (int64_t b = 0; b < f.dims / f.scale_block; ++b) {
        std::span<const float> blk = v.subspan(static_cast<size_t>(b * f.scale_block),
                                               static_cast<size_t>(f.scale_block));
        const float s = pow2_block_scale(block_amax(blk), k_fp4_amax_floor, k_e2m1_max);
        for (int64_t i = 0; i < f.scale_block; ++i) {
            const int64_t e = b * f.scale_block + i;
            const uint8_t code = float_to_e2m1(blk[static_cast<size_t>(i)] / s);
            const uint8_t shifted = (e % 2 == 0) ? code : static_cast<uint8_t>(code << 4);
            row[e / 2] |= std::byte{shifted};  // even element in the low nibble
        }
        scales[b] = std::byte{float_to_ue8m0(s)};
    }
}

void decode_index_fp4(const row_format& f, const std::byte* row, std::span<float> v) {
    const std::byte* scales = row + f.value_bytes;
    for (int64_t e = 0; e < f.dims; ++e) {
        const uint8_t byte = static_cast<uint8_t>(row[e / 2]);
        const uint8_t code = (e % 2 == 0) ? (byte & 0xf) : (byte >> 4);
        const float s = ue8m0_to_float(static_cast<uint8_t>(scales[e / f.scale_block]));
        v[static_cast<size_t>(e)] = e2m1_to_float(code) * s;
    }
}

}  // namespace

void encode_row(const row_format& f, std::span<const float> v, std::byte* row) {
    TANDEM_CHECK(static_cast<int64_t>(v.size()) == f.dims);
    switch (f.encoding) {
        case row_encoding::kv_fp8: return encode_kv_fp8(f, v, row);
        case row_encoding::index_k_fp8: return encode_index_fp8(f, v, row);
        case row_encoding::index_k_fp4: return encode_index_fp4(f, v, row);
        case row_encoding::kv_bf16:
        case row_encoding::index_k_bf16:
            for (int64_t i = 0; i < f.dims; ++i) put_bf16(row + 2 * i, v[static_cast<size_t>(i)]);
            return;
        case row_encoding::kv_fp32:
        case row_encoding::index_k_fp32:
            std::memcpy(row, v.data(), static_cast<size_t>(f.bytes));
            return;
    }
}

void decode_row(const row_format& f, const std::byte* row, std::span<float> v) {
    TANDEM_CHECK(static_cast<int64_t>(v.size()) == f.dims);
    switch (f.encoding) {
        case row_encoding::kv_fp8: return decode_kv_fp8(f, row, v);
        case row_encoding::index_k_fp8: return decode_index_fp8(f, row, v);
        case row_encoding::index_k_fp4: return decode_index_fp4(f, row, v);
        case row_encoding::kv_bf16:
        case row_encoding::index_k_bf16:
            for (int64_t i = 0; i < f.dims; ++i) v[static_cast<size_t>(i)] = get_bf16(row + 2 * i);
            return;
        case row_encoding::kv_fp32:
        case row_encoding::index_k_fp32:
            std::memcpy(v.data(), row, static_cast<size_t>(f.bytes));
            return;
    }
}

}  // namespace tandem::cache::codec
