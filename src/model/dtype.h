// model/dtype.h — Element types found in safetensors checkpoints and their scalar decoders.
//
// Owns: the dtype names of the safetensors format, element sizes, and the exact bit-level
// decoding of the narrow formats DeepSeek-V4 ships (bf16, f16, e4m3fn, ue8m0 block scales, packed
// e2m1 FP4) plus the rounding encoders make-model and the numerics simulation need.
// Decoding is exact (every narrow value is representable in fp32).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tandem::model {

enum class dtype : uint8_t {
    f64,
    f32,
    f16,
    bf16,
    f8_e4m3,  // e4m3fn: bias 7, max 448, no inf, 0x7f/0xff NaN
    f8_e8m0,  // ue8m0 scale: one biased exponent byte, value 2^(e-127)
    i64,
    i32,
    i16,
    i8,  // also packed FP4 (two e2m1 nibbles per byte, element 2j in the low nibble)
    u8,
    boolean,
};

// "F32", "BF16", "F8_E4M3", ...: the safetensors header spelling.
const char* dtype_name(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);
int64_t dtype_size(dtype t);

inline float bits_to_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
inline uint32_t float_to_bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
}

inline float bf16_to_float(uint16_t v) { return bits_to_float(static_cast<uint32_t>(v) << 16); }
// Round-to-nearest-even, as torch's .to(torch.bfloat16). NaN stays NaN.
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t v);
float e4m3_to_float(uint8_t v);
// Round-to-nearest-even with saturation to ±448 (the value must already be clamped by callers
// that simulate quantization; NaN maps to NaN).
uint8_t float_to_e4m3(float f);
inline float e8m0_to_float(uint8_t v) {
    // 0 decodes to 2^-127 (a subnormal); 255 is NaN in OCP MX, never written by DeepSeek.
    if (v == 0) return bits_to_float(0x00400000u);
    return bits_to_float(static_cast<uint32_t>(v) << 23);
}
// e2m1 nibble (sign in bit 3) → value in {0, .5, 1, 1.5, 2, 3, 4, 6} with sign.
float e2m1_to_float(uint8_t nibble);
// Nearest e2m1 code for |f| <= 6, ties to even code.
uint8_t float_to_e2m1(float f);

}  // namespace tandem::model
