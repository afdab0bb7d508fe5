// cpu/amx.h — (cpu/ internal) BF16, FP8 and FP4 weights multiplied on AMX tiles: the
// `backend.cpu_matmul = "amx"` path of linear() / linear_group() (kernels.cpp routes a matrix here
// when its weight_matrix::amx_tiles is set, which the model loader does only on request).
//
// FP8 (e4m3) and FP4 (e2m1) weights: a code times its power-of-two scale has at most 4
// significant bits, so it is exactly a bf16; the kernels decode the codes to bf16 as they go and
// the results are those of the BF16 matrix holding the same values.
//
// What it computes. Each x value is split into three bf16 parts, x = h + m + l (h = bf16(x),
// m = bf16(x − h), l = bf16(x − h − m); the differences are exact in fp32), and y = Σ w·h + Σ w·m +
// Σ w·l with AMX-BF16's TDPBF16PS: every bf16 × bf16 product is exact in fp32, as in the exact
// kernels' fmas, and the sums are fp32 in the tile unit's own order. So y is within a few fp32
// roundings of the exact kernels' value (the golden tolerance holds) but not bitwise it.
//
// What stays: a row's value never depends on the batch, its position in it, the row or output
// tiling or the thread count — every row of every call takes the same tile operations in the same
// k order (design invariant 8). What goes: bitwise agreement with the exact kernels, the scalar
// reference, other machines' AVX2 / AVX-512 and the GPU; hence opt-in, part of the numerics
// identity (pd handshake, prefix-cache keys), and never used by the device backend.
//
// Limits, inherent to AMX-BF16: bf16 denormals (weights below 2^-126, x's parts m and l of tiny
// values) count as zero, and |x| beyond bf16's largest finite value (~3.39e38) rounds to inf.
#pragma once

#include <cstdint>

#include "cpu/weight_matrix.h"

namespace tandem::cpu {

// Whether this process can run AMX-BF16 tiles: the CPU has AMX-TILE and AMX-BF16, the kernel
// enables their state (XCR0) and granted this process the tile data (arch_prctl, asked once), and
// TANDEM_CPU_KERNELS does not pin the kernels to "scalar" or "avx2".
bool amx_bf16_available();

// Whether a matrix can take the AMX path: columns a multiple of 32 (one tile row), and BF16, or FP8
// / FP4 whose scales are powers of two shared by each 32 columns of a row (exact in bf16).
bool amx_fits(const weight_matrix& w);
// Marks a matrix amx_fits() accepts for the tiles (amx_tiles), and amx_fast_scales where its E8M0
// scale codes allow the integer decode (scanned once here, not per call).
void mark_for_tiles(weight_matrix& w);

namespace detail {

// x rows packed for the tiles: per group of 16 rows, per 32 columns, per part (h, m, l), a tile of
// 16 column pairs × 16 rows (uint32 = two bf16) — × `rows` where there are fewer than 16 rows in
// all; the short last group of a longer x leaves its columns past the last row as they were (only
// those rows' results are stored).
int64_t amx_packed_words(int64_t rows, int64_t cols);
// Outputs per work unit of linear(): 64, or more where rows are short — a whole group of 32 rows
// one 4 KB page apart (linear_amx.cpp, rows_per_page), so every unit takes the page-apart tiles
// (FP8 / FP4: 64, or a group of 16 page-apart rows).
int64_t amx_unit_outputs(const weight_matrix& w);
// Rows per work unit: 64, or more for FP8 / FP4, whose weights a unit decodes once for all its rows.
int64_t amx_unit_rows(const weight_matrix& w);
// Packs row groups [g0, g1) of x (rows × cols, row stride xs) into `packed`.
void amx_pack(const float* x, int64_t xs, int64_t rows, int64_t cols, int64_t g0, int64_t g1, uint32_t* packed);
// The tile configuration of a run of amx_tile calls on one thread (a piece of a pass): loaded by
// the first call and again only where x's width changes, released (tiles back in their initial
// state, so a context switch saves no tile data) when the run ends. Why: LDTILECFG takes ~60 ns,
// and loaded per unit it was 1.3% of a `small` batch-16 step. Nothing else may use the tiles on
// the thread during the run.
class amx_tile_run {
public:
    amx_tile_run() = default;
    ~amx_tile_run();
    amx_tile_run(const amx_tile_run&) = delete;
    amx_tile_run& operator=(const amx_tile_run&) = delete;
    int64_t configured_tokens = 0;  // the width loaded; 0: none
};
// y[r·ys + o] = Σ_k x[r, k] · w(o, k) for rows [r0, r1) (r0 a multiple of 16) and outputs
// [o0, o1), from x (`rows` rows) packed by amx_pack. y is the job's row 0, column 0.
void amx_tile(amx_tile_run& run, const uint32_t* packed, int64_t rows, int64_t r0, int64_t r1, const weight_matrix& w,
              int64_t o0, int64_t o1, float* y, int64_t ys);

}  // namespace detail

}  // namespace tandem::cpu
