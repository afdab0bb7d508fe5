// cuda/host/kernel_codec.h — The cache row codecs (cache/codec.h) written once for host and device:
// what the K8 / K9 store kernels write into pool pages and what attention reads back. The bytes
// must be exactly cache::codec's (transfers, checksums and the prefix cache compare pages byte
// for byte across backends), so test/unit/cuda compares every encoding with cache::codec, and
// the parity harness does the same on the GPU (tier 1).
//
// Row layouts (cache/layout.h row_format): kv_fp8 = [e4m3 nope values][bf16 rope][ue8m0 per
// scale_block][zero pad]; index_k_fp4 = [packed e2m1, even element low nibble][ue8m0 per block];
// index_k_fp8 = [e4m3][fp32 scale = max(amax, 1e-8) / 448]; bf16 / fp32 rows are plain arrays.
// All multi-byte fields little-endian.
#pragma once

#include "cuda/host/kernel_math.h"

namespace tandem::kmath {

// Mirrors cache::row_encoding (same order; static_cast between them).
enum class row_enc : uint8_t { kv_fp8, kv_bf16, kv_fp32, index_k_fp8, index_k_bf16, index_k_fp4, index_k_fp32 };

// cache::row_format as a plain struct a kernel can take by value.
struct row_codec {
    row_enc encoding = row_enc::kv_bf16;
    int64_t dims = 0, value_elems = 0, value_bytes = 0, rope_elems = 0, rope_bytes = 0, scale_bytes = 0, pad_bytes = 0,
            scale_block = 0, bytes = 0;
};

TANDEM_HD void put_u16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
}
TANDEM_HD uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
TANDEM_HD void put_f32(uint8_t* p, float f) {
    const uint32_t u = as_bits(f);
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}
TANDEM_HD float get_f32(const uint8_t* p) {
    return as_float(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
                    static_cast<uint32_t>(p[3]) << 24);
}
// The ue8m0 byte of a power-of-two scale in [2^-127, 2^127].
TANDEM_HD uint8_t pow2_to_ue8m0(float pow2_scale) {
    int e = 0;
    frexpf(pow2_scale, &e);
    return static_cast<uint8_t>(e - 1 + 127);
}
TANDEM_HD float block_amax(const float* v, int64_t n) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; ++i) a = a < fabsf(v[i]) ? fabsf(v[i]) : a;
    return a;
}

TANDEM_HD void encode_row(const row_codec& f, const float* v, uint8_t* row) {
    switch (f.encoding) {
        case row_enc::kv_fp8: {
            uint8_t* scales = row + f.value_bytes + f.rope_bytes;
            for (int64_t b = 0; b < f.value_elems / f.scale_block; ++b) {
                const float* blk = v + b * f.scale_block;
                const float s = pow2_block_scale(block_amax(blk, f.scale_block), 1e-4f, 448.0f);
                for (int64_t i = 0; i < f.scale_block; ++i) row[b * f.scale_block + i] = f32_to_e4m3(blk[i] / s);
                scales[b] = pow2_to_ue8m0(s);
            }
            for (int64_t i = 0; i < f.rope_elems; ++i) put_u16(row + f.value_bytes + 2 * i, f32_to_bf16(v[f.value_elems + i]));
            for (int64_t i = 0; i < f.pad_bytes; ++i) scales[f.scale_bytes + i] = 0;
            return;
        }
        case row_enc::index_k_fp8: {
            const float amax = block_amax(v, f.dims);
            const float s = (amax > 1e-8f ? amax : 1e-8f) / 448.0f;
            for (int64_t i = 0; i < f.dims; ++i) row[i] = f32_to_e4m3(v[i] / s);
            put_f32(row + f.value_bytes, s);
            return;
        }
        case row_enc::index_k_fp4: {
            uint8_t* scales = row + f.value_bytes;
            for (int64_t i = 0; i < f.value_bytes; ++i) row[i] = 0;
            const float floor = ldexpf(6.0f, -126);
            for (int64_t b = 0; b < f.dims / f.scale_block; ++b) {
                const float* blk = v + b * f.scale_block;
                const float s = pow2_block_scale(block_amax(blk, f.scale_block), floor, 6.0f);
                for (int64_t i = 0; i < f.scale_block; ++i) {
                    const int64_t e = b * f.scale_block + i;
                    const uint8_t code = f32_to_e2m1(blk[i] / s);
                    row[e / 2] |= (e % 2 == 0) ? code : static_cast<uint8_t>(code << 4);
                }
                scales[b] = pow2_to_ue8m0(s);
            }
            return;
        }
        case row_enc::kv_bf16:
        case row_enc::index_k_bf16:
            for (int64_t i = 0; i < f.dims; ++i) put_u16(row + 2 * i, f32_to_bf16(v[i]));
            return;
        case row_enc::kv_fp32:
        case row_enc::index_k_fp32:
            for (int64_t i = 0; i < f.dims; ++i) put_f32(row + 4 * i, v[i]);
            return;
    }
}

TANDEM_HD void decode_row(const row_codec& f, const uint8_t* row, float* v) {
    switch (f.encoding) {
        case row_enc::kv_fp8: {
            const uint8_t* scales = row + f.value_bytes + f.rope_bytes;
            for (int64_t i = 0; i < f.value_elems; ++i) v[i] = e4m3_to_f32(row[i]) * ue8m0_to_f32(scales[i / f.scale_block]);
            for (int64_t i = 0; i < f.rope_elems; ++i) v[f.value_elems + i] = bf16_to_f32(get_u16(row + f.value_bytes + 2 * i));
            return;
        }
        case row_enc::index_k_fp8: {
            const float s = get_f32(row + f.value_bytes);
            for (int64_t i = 0; i < f.dims; ++i) v[i] = e4m3_to_f32(row[i]) * s;
            return;
        }
        case row_enc::index_k_fp4: {
            const uint8_t* scales = row + f.value_bytes;
            for (int64_t e = 0; e < f.dims; ++e) {
                const uint8_t code = (e % 2 == 0) ? (row[e / 2] & 0xf) : (row[e / 2] >> 4);
                v[e] = e2m1_to_f32(code) * ue8m0_to_f32(scales[e / f.scale_block]);
            }
            return;
        }
        case row_enc::kv_bf16:
        case row_enc::index_k_bf16:
            for (int64_t i = 0; i < f.dims; ++i) v[i] = bf16_to_f32(get_u16(row + 2 * i));
            return;
        case row_enc::kv_fp32:
        case row_enc::index_k_fp32:
            for (int64_t i = 0; i < f.dims; ++i) v[i] = get_f32(row + 4 * i);
            return;
    }
}

}  // namespace tandem::kmath
