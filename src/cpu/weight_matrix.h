// cpu/weight_matrix.h — A linear layer's weight matrix in the form the checkpoint stores it.
//
// Owns: the description of a row-major [rows = out, cols = in] matrix whose bytes live elsewhere
// (normally the checkpoint's bytes in memory, used in place): fp32, bf16, f16, FP8 e4m3 with block
// scales (ue8m0 bytes or fp32, one per block_rows × block_cols tile: DeepSeek's 128 × 128), or
// FP4 e2m1 packed two per byte along a row (element 2j in the low nibble) with one ue8m0 scale per
// 1 × 32 group. Kernels decode these values in registers; a decoded value is the exact product
// code × scale (both formats are exact in fp32), so a quantized matrix and its fp32 expansion
// give bitwise the same results.
//
// A view can cover a contiguous range of rows of a larger matrix (`row0`): scale tiles are
// indexed with the absolute row, so slicing never changes a value.
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::cpu {

enum class weight_form : uint8_t { f32, bf16, f16, fp8_e4m3, fp4_e2m1 };
enum class scale_form : uint8_t { none, e8m0, f32 };

const char* weight_form_name(weight_form f);

struct weight_matrix {
    weight_form form = weight_form::f32;
    int64_t rows = 0, cols = 0;     // this view: [rows, cols]
    const uint8_t* data = nullptr;  // row 0 of the WHOLE stored matrix (not of the view)
    int64_t row0 = 0;               // the view's first row inside the whole matrix
    scale_form scale = scale_form::none;
    const uint8_t* scales = nullptr;  // [ceil(all rows / block_rows), scale_cols], row-major
    int64_t block_rows = 1, block_cols = 1, scale_cols = 0;
    // Multiply on AMX-BF16 tiles (cpu/amx.h: x in three bf16 parts, fp32 sums in the tile unit's
    // order) instead of the exact-order kernels. Set by the loader only with
    // backend.cpu_matmul = "amx", only on matrices amx_fits() accepts (BF16, FP8, FP4).
    bool amx_tiles = false;
    // Set with amx_tiles (mark_for_tiles, cpu/amx.h) where every E8M0 scale code of this FP8 / FP4
    // view lies in the tiles' integer decode range — real checkpoints' do; others take the fp32
    // decode route, the same values more slowly.
    bool amx_fast_scales = false;

    // Bytes of one stored row (fp4: cols / 2).
    int64_t row_bytes() const;
    // Stored bytes of this view's values (scales not included).
    int64_t value_bytes() const { return rows * row_bytes(); }
    const uint8_t* row_ptr(int64_t r) const { return data + (row0 + r) * row_bytes(); }
    // Rows [first, first + n) of this view, as a view of the same storage.
    weight_matrix slice_rows(int64_t first, int64_t n) const;
    // Scale of the tile holding (row r of this view, column c); 1 when unscaled.
    float scale_at(int64_t r, int64_t c) const;
    // Element (r, c) decoded exactly (code × scale).
    float at(int64_t r, int64_t c) const;
    // A full row decoded into out[cols].
    void decode_row(int64_t r, float* out) const;

    static weight_matrix from_f32(const float* w, int64_t rows, int64_t cols);
};

// Exact decoders shared by the scalar kernels and the scalar tails of the SIMD kernels.
inline float bits_as_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline float decode_e8m0(uint8_t v) {
    return v == 0 ? bits_as_float(0x00400000u) : bits_as_float(static_cast<uint32_t>(v) << 23);
}
// e4m3fn bits placed into an fp32 exponent/mantissa: the value times 2^-120 (subnormals
// included, as fp32 denormals). The kernels multiply by scale · 2^120, one exact rounding.
inline float e4m3_times_2_pow_minus_120(uint8_t v) {
    return bits_as_float((static_cast<uint32_t>(v & 0x80u) << 24) | (static_cast<uint32_t>(v & 0x7fu) << 20));
}
// The scale column of stored column k (k / block_cols), with the checkpoints' two block widths
// (FP4's 32, FP8's 128) as shifts: the kernels look a scale up once per group of 32 or 128 weights
// per output, and a 64-bit division there was a large part of a 1-row FP4 GEMV's time.
inline int64_t scale_col_of(const weight_matrix& w, int64_t k) {
    if (w.block_cols == 32) return k >> 5;
    if (w.block_cols == 128) return k >> 7;
    return k / w.block_cols;
}
inline constexpr float k_two_pow_120 = 1.329227995784916e36f;  // 2^120
inline constexpr float k_e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace tandem::cpu
