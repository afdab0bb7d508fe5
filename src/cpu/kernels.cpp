// cpu/kernels.cpp — see kernels.h: dispatch, tiling and threading around the per-ISA tiles.
#include "cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/kernels_internal.h"

namespace tandem::cpu {

namespace detail {

const kernel_table& active_kernels() {
    static const kernel_table& table = [] () -> const kernel_table& {
        const char* force = std::getenv("TANDEM_CPU_KERNELS");
        if (force && std::strcmp(force, "scalar") == 0) return scalar_kernels();
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        if (avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c")) {
            // TANDEM_CPU_KERNELS=avx2 keeps AVX-512 machines on the AVX2 tile (A/B runs).
            const bool avx2_only = force && std::strcmp(force, "avx2") == 0;
            if (!avx2_only && avx512_kernels() && __builtin_cpu_supports("avx512f")) return *avx512_kernels();
            return *avx2_kernels();
        }
#endif
        return scalar_kernels();
    }();
    return table;
}

}  // namespace detail

const char* kernel_isa() { return detail::active_kernels().name; }

float dot(const float* a, const float* b, int64_t n) { return detail::active_kernels().dot(a, b, n); }

void dots(const float* q, const float* const* keys, int64_t count, int64_t n, float* out) {
    detail::active_kernels().dots(q, keys, count, n, out);
}

void dots_heads(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count, int64_t n,
                float* out, int64_t out_stride) {
    detail::active_kernels().dots_heads(q, q_stride, heads, keys, count, n, out, out_stride);
}

void axpy(float a, const float* x, float* y, int64_t n) { detail::active_kernels().axpy(a, x, y, n); }

float exp_shifted(float* v, int64_t n, float shift) { return detail::active_kernels().exp_shifted(v, n, shift); }

void swiglu(const float* g, const float* u, int64_t n, float limit, float* out) {
    detail::active_kernels().swiglu(g, u, n, limit, out);
}

void axpys(const float* a, const float* const* x, int64_t count, float* y, int64_t n) {
    detail::active_kernels().axpys(a, x, count, y, n);
}

namespace {

// Work unit of a linear: a block of output columns over a tile of rows. The block's weights (a
// few KB to a few hundred KB) stay in cache while the tile's rows stream past them, and each
// weight is read from memory once per call whatever the batch (rows are tiled only when there
// are many). Units run tile by tile — every block of tile 0, then of tile 1 — so a tile's rows
// stay in L2 across its blocks and each block's weights arrive behind the kernels' prefetch of
// the next group (contiguous: the next block's first rows follow the last group's), instead of
// block by block, where every unit fetched a new x tile (240 KB at K = 1024) from L3 without a
// prefetch. Xeon 6 VM, one thread, bf16 K = 1024, 512 rows: 0.666 -> 0.718 of the FMA peak.
constexpr int64_t k_row_tile = 60;  // a multiple of the AVX2 kernel's 6-row group

// Outputs per block: about 96 KB of weights, in whole multiples of 48 — the output groups of
// every tile divide 48 (the GEMVs' 8, the AVX2 blocks' 2, 3 and 4, the AVX-512 tile's 4, 6 and 8,
// the scratch GEMM's 16), so no group is cut short at a block's end. Why: with multiples of 12,
// rows of 8 KB (bf16 at K = 4096: V4-Flash's lm head) made 12-output blocks, and each one ran
// 8 outputs in the GEMV's 8-stream group and 4 in its one-output remainder (a single fma chain),
// and the scratch GEMM a group of 16 with 4 repeated outputs; FP8 at K = 4096 (4 KB rows) made
// 24-output blocks, a third of its GEMM groups half empty. A block of 48 such rows is 384 KB,
// still far inside a core's L2 for the row tiles that stream past it.
constexpr int64_t k_block_quantum = 48;

int64_t tiles_of(int64_t rows) { return (rows + k_row_tile - 1) / k_row_tile; }
int64_t blocks_of(const weight_matrix& w, int64_t block) { return (w.rows + block - 1) / block; }

// Tile t's first row: the rows spread evenly over the tiles, each boundary on a multiple of 6
// (the AVX2 kernel's row group, two of the scratch GEMM's 3-row blocks). Why: every tile decodes
// the block's weights once, so a short last tile pays that decode for few rows — an expert given
// 128 rows of a prefill ran tiles of 60, 60 and 8, the last one decoding 96 KB of weights for 8
// rows; evenly it runs 42, 42 and 44. A row's results do not depend on its tile.
int64_t tile_start(int64_t rows, int64_t tiles, int64_t t) {
    return t >= tiles ? rows : rows * t / tiles / 6 * 6;
}

int64_t units_of(const linear_job& j) {
    if (j.rows <= 0 || j.w.rows <= 0) return 0;
    const int64_t block = detail::output_block(j.w);
    return blocks_of(j.w, block) * tiles_of(j.rows);
}

void run_unit(const detail::kernel_table& k, const linear_job& j, int64_t u) {
    const int64_t block = detail::output_block(j.w), tiles = tiles_of(j.rows), blocks = blocks_of(j.w, block);
    const int64_t t = u / blocks, b = u % blocks;
    const int64_t o0 = b * block, o1 = std::min(j.w.rows, o0 + block);
    const int64_t r0 = tile_start(j.rows, tiles, t), r1 = tile_start(j.rows, tiles, t + 1);
    k.tile(j.x + r0 * j.x_stride, j.x_stride, r1 - r0, j.w, o0, o1, j.y + r0 * j.y_stride + o0, j.y_stride);
}

}  // namespace

int64_t detail::output_block(const weight_matrix& w) {
    const int64_t row_bytes = std::max<int64_t>(1, w.row_bytes());
    const int64_t want = (int64_t{96} << 10) / row_bytes / k_block_quantum * k_block_quantum;
    return std::clamp<int64_t>(want, k_block_quantum, 8 * k_block_quantum);
}

void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const weight_matrix& w, float* y,
            int64_t y_stride) {
    const linear_job job{x, rows, x_stride, w, y, y_stride};
    const int64_t units = units_of(job);
    if (units == 0) return;
    const detail::kernel_table& k = detail::active_kernels();
    pool.parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) run_unit(k, job, u);
    });
}

void linear_group(thread_pool& pool, std::span<const linear_job> jobs) {
    // first[i]: the group-wide index of job i's first unit (first[jobs.size()] = all units).
    // The caller's thread owns this buffer for the call; workers only read it.
    thread_local std::vector<int64_t> first;
    first.resize(jobs.size() + 1);
    first[0] = 0;
    for (size_t i = 0; i < jobs.size(); ++i) first[i + 1] = first[i] + units_of(jobs[i]);
    const int64_t units = first.back();
    if (units == 0) return;
    const detail::kernel_table& k = detail::active_kernels();
    const int64_t* starts = first.data();
    pool.parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
        size_t i = static_cast<size_t>(std::upper_bound(starts, starts + jobs.size() + 1, u0) - starts) - 1;
        for (int64_t u = u0; u < u1; ++u) {
            while (u >= starts[i + 1]) ++i;
            run_unit(k, jobs[i], u - starts[i]);
        }
    });
}

void linear(thread_pool& pool, const float* x, int64_t rows, int64_t x_stride, const float* w, int64_t in,
            int64_t out, float* y, int64_t y_stride) {
    linear(pool, x, rows, x_stride, weight_matrix::from_f32(w, out, in), y, y_stride);
}

float mean_square(const float* x, int64_t n) {
    return dot(x, x, n) / static_cast<float>(n);
}

void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y) {
    const float r = 1.0f / std::sqrt(mean_square(x, n) + static_cast<float>(eps));
    detail::active_kernels().scale_rows(x, w, r, n, y);
}

}  // namespace tandem::cpu
