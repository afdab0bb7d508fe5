// cache/codec.h — Scalar reference codecs for every cache row format and the element formats
// under them (bf16, e4m3, e2m1, ue8m0), plus the official quantize-dequantize simulations.
//
// Owns: the bit-level meaning of stored rows. The CPU forward pass and every test use these
// functions; a CUDA kernel is correct when it produces the same bytes. Rounding is
// round-to-nearest-even everywhere; e4m3 and e2m1 saturate (clamp) like the official kernels.
//
// Exactness (dsv4-model.md §3.2): kv_fp8 and index_k_fp4 round-trip the official values exactly
// (values already passed through fp8_qdq_blocks / fp4_qdq_blocks); bf16 rows round-trip bf16
// values; fp32 rows round-trip everything; index_k_fp8 is lossy by design (non-power-of-two
// per-row scale, as SGLang's default CUDA path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cache/layout.h"

namespace tandem::cache::codec {

// Element formats.
uint16_t float_to_bf16(float x);  // RNE; NaN stays NaN
float bf16_to_float(uint16_t b);
uint8_t float_to_e4m3(float x);   // e4m3fn: RNE, saturates to +-448, NaN -> 0x7f
float e4m3_to_float(uint8_t b);
uint8_t float_to_e2m1(float x);   // 4-bit code, RNE, saturates to +-6
float e2m1_to_float(uint8_t code);
float ue8m0_to_float(uint8_t b);  // 2^(b - 127)
uint8_t float_to_ue8m0(float pow2_scale);  // exact for powers of two in [2^-127, 2^127]

// The power-of-two scale of a block: 2^ceil(log2(max(amax, amax_floor) / max_code)).
float pow2_block_scale(float amax, float amax_floor, float max_code);

// Official QAT simulations (in place): fp8 e4m3, block `block`, ue8m0 scales, amax floor 1e-4
// (§6.2); fp4 e2m1, block `block`, amax floor 6 * 2^-126 (§6.3). x.size() % block == 0.
void fp8_qdq_blocks(std::span<float> x, int64_t block);
void fp4_qdq_blocks(std::span<float> x, int64_t block);

// Row codecs: `values` has fmt.dims elements; `row` has fmt.bytes bytes.
void encode_row(const row_format& fmt, std::span<const float> values, std::byte* row);
void decode_row(const row_format& fmt, const std::byte* row, std::span<float> values);

// n rows stored back to back (stride fmt.bytes: a run inside one page, or of the window ring)
// into out[n, fmt.dims]: bitwise decode_row of each row, several times faster (codec_rows.cpp).
void decode_rows(const row_format& fmt, const std::byte* rows, int64_t n, float* out);

}  // namespace tandem::cache::codec
