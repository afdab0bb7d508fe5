// cpu/kernels.cpp — see kernels.h: dispatch, tiling and threading around the per-ISA tiles.
#include "cpu/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/amx.h"
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

// ---- Matrices on AMX tiles (cpu/amx.h) ------------------------------------------------------
//
// Units of amx_unit_rows (64; 128 for FP8 / FP4, whose units decode their outputs' weights once)
// × amx_unit_outputs (64 outputs, or a whole BF16 page-apart group where rows are short), tile by tile like the exact units. With more than 16 rows in some job, two passes: every
// job's x packed once (per group of 16 rows), then the units; a decode step's jobs in one pass (see
// run_amx_batch). A row's values do not depend on the units: each output element runs the same
// tile operations over k.

int64_t amx_output_blocks(const linear_job& j) {
    const int64_t outputs = detail::amx_unit_outputs(j.w);
    return (j.w.rows + outputs - 1) / outputs;
}

int64_t amx_units_of(const linear_job& j) {
    if (j.rows <= 0 || j.w.rows <= 0) return 0;
    const int64_t rows = detail::amx_unit_rows(j.w);
    return (j.rows + rows - 1) / rows * amx_output_blocks(j);
}

// Which job a group-wide unit belongs to: starts[i] is job i's first unit, starts[n] all units.
size_t job_of(const int64_t* starts, size_t n, int64_t u) {
    return static_cast<size_t>(std::upper_bound(starts, starts + n + 1, u) - starts) - 1;
}

void run_amx_batch(thread_pool& pool, const std::vector<const linear_job*>& jobs) {
    // The caller's thread owns these for the call; workers read them and write disjoint ranges.
    thread_local std::vector<int64_t> pack_first, unit_first, words_first;
    thread_local std::vector<uint32_t> packed;
    const size_t n = jobs.size();
    pack_first.assign(n + 1, 0);
    unit_first.assign(n + 1, 0);
    words_first.assign(n + 1, 0);
    // words_at[i]: where job i's packed x lies. Jobs over the same x (an expert's gate and up
    // projections) share one packing; the later ones pack nothing.
    thread_local std::vector<int64_t> words_at;
    thread_local std::vector<size_t> owner;  // the job whose packing job i reads
    words_at.assign(n, 0);
    owner.assign(n, 0);
    bool one_group_each = true;
    for (size_t i = 0; i < n; ++i) {
        const linear_job& j = *jobs[i];
        size_t same = i;
        for (size_t e = 0; e < i && same == i; ++e)
            if (jobs[e]->x == j.x && jobs[e]->x_stride == j.x_stride && jobs[e]->rows == j.rows &&
                jobs[e]->w.cols == j.w.cols)
                same = e;
        const bool packs_own = same == i;
        pack_first[i + 1] = pack_first[i] + (packs_own ? (j.rows + 15) / 16 : 0);
        unit_first[i + 1] = unit_first[i] + amx_units_of(j);
        words_first[i + 1] = words_first[i] + (packs_own ? detail::amx_packed_words(j.rows, j.w.cols) : 0);
        words_at[i] = packs_own ? words_first[i] : words_at[same];
        owner[i] = same;
        one_group_each = one_group_each && j.rows <= 16;
    }
    if (unit_first[n] == 0) return;
    const int64_t *units = unit_first.data(), *offsets = words_at.data();
    const linear_job* const* job = jobs.data();
    const auto multiply = [=](detail::amx_tile_run& run, const uint32_t* words, size_t i, int64_t u) {
        const linear_job& j = *job[i];
        const int64_t outputs = detail::amx_unit_outputs(j.w), blocks = amx_output_blocks(j), v = u - units[i];
        const int64_t unit_rows = detail::amx_unit_rows(j.w), r0 = v / blocks * unit_rows, o0 = v % blocks * outputs;
        detail::amx_tile(run, words + offsets[i], j.rows, r0, std::min(j.rows, r0 + unit_rows), j.w, o0,
                         std::min(j.w.rows, o0 + outputs), j.y, j.y_stride);
    };
    if (one_group_each) {
        // A decode step's rows (at most 16 per job): every thread packs the x it needs itself, on its
        // first unit of that job, in one pass. Why: a serial packing phase before the pass left the
        // other thread waiting and cost a second fork/join per linear (a 256 × 1024 GEMV: 27 → 11
        // µs); packing one group takes ~2 µs at K = 1024. Same words, so the same bits.
        static std::atomic<uint64_t> calls{0};
        const uint64_t call = calls.fetch_add(1, std::memory_order_relaxed) + 1;
        const int64_t total_words = words_first[n];
        const size_t* owners = owner.data();
        pool.parallel_for(units[n], 1, [=](int64_t u0, int64_t u1) {
            thread_local std::vector<uint32_t> own;           // this thread's packed x
            thread_local std::vector<uint64_t> packed_in;     // per job: the call it was packed in
            if (own.size() < static_cast<size_t>(total_words)) own.resize(static_cast<size_t>(total_words));
            if (packed_in.size() < n) packed_in.resize(n, 0);
            detail::amx_tile_run run;
            for (int64_t u = u0; u < u1; ++u) {
                const size_t i = job_of(units, n, u), o = owners[i];
                if (packed_in[o] != call) {
                    const linear_job& j = *job[o];
                    detail::amx_pack(j.x, j.x_stride, j.rows, j.w.cols, 0, 1, own.data() + offsets[o]);
                    packed_in[o] = call;
                }
                multiply(run, own.data(), i, u);
            }
        });
        return;
    }
    if (packed.size() < static_cast<size_t>(words_first[n])) packed.resize(static_cast<size_t>(words_first[n]));
    // Workers must not name the thread_locals (they would get their own): plain pointers.
    uint32_t* words = packed.data();
    const int64_t* packs = pack_first.data();
    const auto pack = [=](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
            const size_t i = job_of(packs, n, u);
            const linear_job& j = *job[i];
            const int64_t g = u - packs[i];
            detail::amx_pack(j.x, j.x_stride, j.rows, j.w.cols, g, g + 1, words + offsets[i]);
        }
    };
    pool.parallel_for(packs[n], 1, pack);
    pool.parallel_for(units[n], 1, [=](int64_t u0, int64_t u1) {
        detail::amx_tile_run run;
        for (int64_t u = u0; u < u1; ++u) multiply(run, words, job_of(units, n, u), u);
    });
}

// The packed x of one batch stays within k_max_packed_words (16 MB): jobs run in batches, and a job
// with more rows in row slices of a multiple of 16 (a row's values do not depend on its slice). So
// a long prefill's packing costs a bounded buffer, not its rows × K × 6 bytes.
constexpr int64_t k_max_packed_words = int64_t{4} << 20;

void run_amx(thread_pool& pool, const std::vector<const linear_job*>& jobs) {
    thread_local std::vector<linear_job> pieces;
    thread_local std::vector<const linear_job*> batch;
    pieces.clear();
    for (const linear_job* j : jobs) {
        if (j->rows <= 0 || j->w.rows <= 0) continue;
        const int64_t slice = std::max<int64_t>(16, k_max_packed_words / detail::amx_packed_words(16, j->w.cols) * 16);
        for (int64_t r0 = 0; r0 < j->rows; r0 += slice)
            pieces.push_back({j->x + r0 * j->x_stride, std::min(slice, j->rows - r0), j->x_stride, j->w,
                              j->y + r0 * j->y_stride, j->y_stride});
    }
    batch.clear();
    int64_t words = 0;
    for (const linear_job& p : pieces) {
        const int64_t need = detail::amx_packed_words(p.rows, p.w.cols);
        if (!batch.empty() && words + need > k_max_packed_words) {
            run_amx_batch(pool, batch);
            batch.clear();
            words = 0;
        }
        batch.push_back(&p);
        words += need;
    }
    if (!batch.empty()) run_amx_batch(pool, batch);
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
    if (w.amx_tiles) {
        thread_local std::vector<const linear_job*> one(1);
        one[0] = &job;
        return run_amx(pool, one);
    }
    const int64_t units = units_of(job);
    if (units == 0) return;
    const detail::kernel_table& k = detail::active_kernels();
    pool.parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) run_unit(k, job, u);
    });
}

void linear_group(thread_pool& pool, std::span<const linear_job> jobs) {
    // Matrices on AMX tiles run first in their own passes; the rest below as before.
    thread_local std::vector<const linear_job*> amx;
    thread_local std::vector<linear_job> exact;
    amx.clear();
    for (const linear_job& j : jobs)
        if (j.w.amx_tiles) amx.push_back(&j);
    if (!amx.empty()) {
        run_amx(pool, amx);
        if (amx.size() == jobs.size()) return;
        exact.clear();
        for (const linear_job& j : jobs)
            if (!j.w.amx_tiles) exact.push_back(j);
        jobs = exact;
    }
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
        size_t i = job_of(starts, jobs.size(), u0);
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
