// model/dtype.cpp — dtype names and narrow-format conversions (see dtype.h).
#include "model/dtype.h"

#include <array>
#include <cmath>

namespace tandem::model {

namespace {

struct dtype_row {
    dtype type;
    std::string_view name;
    int64_t size;
};

constexpr std::array<dtype_row, 12> k_dtypes = {{
    {dtype::f64, "F64", 8},
    {dtype::f32, "F32", 4},
    {dtype::f16, "F16", 2},
    {dtype::bf16, "BF16", 2},
    {dtype::f8_e4m3, "F8_E4M3", 1},
    {dtype::f8_e8m0, "F8_E8M0", 1},
    {dtype::i64, "I64", 8},
    {dtype::i32, "I32", 4},
    {dtype::i16, "I16", 2},
    {dtype::i8, "I8", 1},
    {dtype::u8, "U8", 1},
    {dtype::boolean, "BOOL", 1},
}};

constexpr std::array<float, 8> k_e2m1_magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

const char* dtype_name(dtype t) {
    for (const auto& row : k_dtypes)
        if (row.type == t) return row.name.data();
    return "?";
}

std::optional<dtype> dtype_from_name(std::string_view name) {
    for (const auto& row : k_dtypes)
        if (row.name == name) return row.type;
    return std::nullopt;
}

int64_t dtype_size(dtype t) {
    for (const auto& row : k_dtypes)
        if (row.type == t) return row.size;
    return 0;
}

uint16_t float_to_bf16(float f) {
    uint32_t bits = float_to_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_float(uint16_t v) {
    uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
    uint32_t exp = (v >> 10) & 0x1fu;
    uint32_t mant = v & 0x3ffu;
    if (exp == 0) {
        // Subnormal: mant * 2^-24, exact in fp32.
        float mag = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -mag : mag;
    }
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

float e4m3_to_float(uint8_t v) {
    bool negative = (v & 0x80u) != 0;
    uint32_t exp = (v >> 3) & 0xfu;
    uint32_t mant = v & 0x7u;
    float mag;
    if (exp == 15 && mant == 7) return std::nanf("");
    if (exp == 0) mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: m/8 * 2^-6
    else mag = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, static_cast<int>(exp) - 7);
    return negative ? -mag : mag;
}

uint8_t float_to_e4m3(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
    const float a = std::fabs(f);
    if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);
    if (a < 0.015625f) {  // below the smallest normal 2^-6: subnormal steps of 2^-9
        // nearbyint rounds half to even; 8 steps is the smallest normal, code 0x08.
        return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f)));
    }
    int e = 0;
    std::frexp(a, &e);  // a = fr · 2^e, fr in [0.5, 1)
    int exp = e - 1;
    int mant = static_cast<int>(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f));
    if (mant == 8) mant = 0, ++exp;
    int code = ((exp + 7) << 3) | mant;
    return static_cast<uint8_t>(sign | std::min(code, 0x7e));
}

float e2m1_to_float(uint8_t nibble) {
    float mag = k_e2m1_magnitudes[nibble & 0x7u];
    return (nibble & 0x8u) ? -mag : mag;
}

uint8_t float_to_e2m1(float f) {
    // Nearest magnitude by counting the midpoints below |f|; a value exactly on a midpoint goes to
    // the even code (strict comparison above an even code, ≥ above an odd one). NaN gives code 0.
    const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
    const float a = std::fabs(f);
    const uint8_t code = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                              (a >= 3.5f) + (a > 5.0f));
    return static_cast<uint8_t>(sign | code);
}

}  // namespace tandem::model
