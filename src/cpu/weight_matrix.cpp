// cpu/weight_matrix.cpp — see weight_matrix.h.
#include "cpu/weight_matrix.h"

namespace tandem::cpu {

const char* weight_form_name(weight_form f) {
    switch (f) {
        case weight_form::f32: return "f32";
        case weight_form::bf16: return "bf16";
        case weight_form::f16: return "f16";
        case weight_form::fp8_e4m3: return "fp8_e4m3";
        case weight_form::fp4_e2m1: return "fp4_e2m1";
    }
    return "?";
}

int64_t weight_matrix::row_bytes() const {
    switch (form) {
        case weight_form::f32: return cols * 4;
        case weight_form::bf16:
        case weight_form::f16: return cols * 2;
        case weight_form::fp8_e4m3: return cols;
        case weight_form::fp4_e2m1: return cols / 2;
    }
    return 0;
}

weight_matrix weight_matrix::slice_rows(int64_t first, int64_t n) const {
    weight_matrix v = *this;
    v.row0 = row0 + first;
    v.rows = n;
    return v;
}

float weight_matrix::scale_at(int64_t r, int64_t c) const {
    if (scale == scale_form::none) return 1.0f;
    const int64_t at = ((row0 + r) / block_rows) * scale_cols + c / block_cols;
    if (scale == scale_form::e8m0) return decode_e8m0(scales[at]);
    float s;
    std::memcpy(&s, scales + 4 * at, 4);
    return s;
}

namespace {
float f16_bits_to_float(uint16_t v) {
    const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16, exp = (v >> 10) & 0x1fu, mant = v & 0x3ffu;
    if (exp == 0) {  // subnormal: mant · 2^-24, exact
        const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
        return sign ? -mag : mag;
    }
    if (exp == 31) return bits_as_float(sign | 0x7f800000u | (mant << 13));
    return bits_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
}  // namespace

float weight_matrix::at(int64_t r, int64_t c) const {
    const uint8_t* row = row_ptr(r);
    switch (form) {
        case weight_form::f32: {
            float f;
            std::memcpy(&f, row + 4 * c, 4);
            return f;
        }
        case weight_form::bf16: {
            uint16_t v;
            std::memcpy(&v, row + 2 * c, 2);
            return bits_as_float(static_cast<uint32_t>(v) << 16);
        }
        case weight_form::f16: {
            uint16_t v;
            std::memcpy(&v, row + 2 * c, 2);
            return f16_bits_to_float(v);
        }
        case weight_form::fp8_e4m3:
            return e4m3_times_2_pow_minus_120(row[c]) * (scale_at(r, c) * k_two_pow_120);
        case weight_form::fp4_e2m1: {
            const uint8_t nib = (c % 2 == 0) ? (row[c / 2] & 0xf) : (row[c / 2] >> 4);
            const float mag = k_e2m1_values[nib & 7];
            return (nib & 8 ? -mag : mag) * scale_at(r, c);
        }
    }
    return 0.0f;
}

void weight_matrix::decode_row(int64_t r, float* out) const {
    // The unscaled forms without at()'s per-element dispatch: a step's embedding rows come through
    // here on one thread (at batch 16 of `small` ~0.5% of the step with at()). Same values.
    const uint8_t* row = row_ptr(r);
    if (form == weight_form::f32) {
        std::memcpy(out, row, static_cast<size_t>(cols) * 4);
        return;
    }
    if (form == weight_form::bf16) {
        for (int64_t c = 0; c < cols; ++c) {
            uint16_t v;
            std::memcpy(&v, row + 2 * c, 2);
            out[c] = bits_as_float(static_cast<uint32_t>(v) << 16);
        }
        return;
    }
    for (int64_t c = 0; c < cols; ++c) out[c] = at(r, c);
}

weight_matrix weight_matrix::from_f32(const float* w, int64_t rows, int64_t cols) {
    weight_matrix m;
    m.form = weight_form::f32;
    m.rows = rows;
    m.cols = cols;
    m.data = reinterpret_cast<const uint8_t*>(w);
    return m;
}

}  // namespace tandem::cpu
