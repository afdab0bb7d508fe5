// Kernels on weights in their stored form: every form decodes exactly (checked against the
// model's scalar decoders for every code), a stored matrix gives bitwise the results of its fp32
// expansion, and the results do not depend on the batch, the thread count, the row slice or the
// instruction set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/amx.h"
#include "cpu/kernels.h"
#include "cpu/kernels_internal.h"
#include "cpu/thread_pool.h"
#include "model/dtype.h"

using namespace tandem::cpu;
namespace md = tandem::model;

namespace {

// A random matrix in one stored form, with the bytes it points into.
struct stored {
    std::vector<uint8_t> bytes, scales;
    weight_matrix m;
};

stored make_stored(weight_form form, scale_form sf, int64_t rows, int64_t cols, int64_t block, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd;
    stored s;
    s.m.form = form;
    s.m.rows = rows;
    s.m.cols = cols;
    const int64_t row_bytes = form == weight_form::f32 ? cols * 4
                              : form == weight_form::fp8_e4m3 ? cols
                              : form == weight_form::fp4_e2m1 ? cols / 2 : cols * 2;
    s.bytes.resize(static_cast<size_t>(rows * row_bytes));
    for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = nd(rng);
        switch (form) {
            case weight_form::f32: std::memcpy(&s.bytes[size_t(4 * i)], &v, 4); break;
            case weight_form::bf16: {
                uint16_t h = md::float_to_bf16(v);
                std::memcpy(&s.bytes[size_t(2 * i)], &h, 2);
                break;
            }
            case weight_form::f16: {
                uint16_t h = static_cast<uint16_t>(rng() & 0xfbffu);  // any finite half, subnormals too
                std::memcpy(&s.bytes[size_t(2 * i)], &h, 2);
                break;
            }
            case weight_form::fp8_e4m3: {
                uint8_t b = static_cast<uint8_t>(rng());
                if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
                s.bytes[size_t(i)] = b;
                break;
            }
            case weight_form::fp4_e2m1:
                s.bytes[size_t(i / 2)] |= static_cast<uint8_t>((rng() & 0xf) << (4 * (i % 2)));
                break;
        }
    }
    if (form == weight_form::fp8_e4m3 || form == weight_form::fp4_e2m1) {
        const bool fp4 = form == weight_form::fp4_e2m1;
        s.m.block_rows = fp4 ? 1 : block;
        s.m.block_cols = fp4 ? 32 : block;
        s.m.scale_cols = (cols + s.m.block_cols - 1) / s.m.block_cols;
        const int64_t n = ((rows + s.m.block_rows - 1) / s.m.block_rows) * s.m.scale_cols;
        s.m.scale = sf;
        s.scales.resize(static_cast<size_t>(n * (sf == scale_form::f32 ? 4 : 1)));
        for (int64_t i = 0; i < n; ++i) {
            if (sf == scale_form::e8m0) {
                s.scales[size_t(i)] = static_cast<uint8_t>(110 + rng() % 20);  // 2^-17 .. 2^2
            } else {
                float v = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, -int(rng() % 12));
                std::memcpy(&s.scales[size_t(4 * i)], &v, 4);
            }
        }
        s.m.scales = s.scales.data();
    }
    s.m.data = s.bytes.data();
    return s;
}

std::vector<float> expand(const weight_matrix& m) {
    std::vector<float> f(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.decode_row(r, &f[r * m.cols]);
    return f;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

// A weight form with its scales (block: FP8's block width and height; FP4's is always 32).
struct form_case {
    weight_form form;
    scale_form scale;
    int64_t block;
};

}  // namespace

TEST_CASE("cpu weights: every stored code decodes exactly") {
    for (int v = 0; v < 256; ++v) {
        if ((v & 0x7f) == 0x7f) continue;  // e4m3fn NaN
        const float want = md::e4m3_to_float(static_cast<uint8_t>(v));
        const float got = e4m3_times_2_pow_minus_120(static_cast<uint8_t>(v)) * k_two_pow_120;
        CHECK(std::memcmp(&want, &got, 4) == 0);
    }
    for (int v = 0; v < 256; ++v) CHECK(decode_e8m0(static_cast<uint8_t>(v)) == md::e8m0_to_float(static_cast<uint8_t>(v)));
    for (uint8_t nib = 0; nib < 16; ++nib) {
        const float mag = k_e2m1_values[nib & 7];
        CHECK((nib & 8 ? -mag : mag) == md::e2m1_to_float(nib));
    }
    // Element accessors agree with the model's decoders, scales included.
    for (weight_form form : {weight_form::bf16, weight_form::f16, weight_form::fp8_e4m3, weight_form::fp4_e2m1}) {
        CAPTURE(weight_form_name(form));
        stored s = make_stored(form, scale_form::e8m0, 5, 64, 16, 3);
        for (int64_t r = 0; r < 5; ++r)
            for (int64_t c = 0; c < 64; ++c) {
                float want = 0;
                const uint8_t* row = s.m.row_ptr(r);
                uint16_t h;
                switch (form) {
                    case weight_form::bf16: std::memcpy(&h, row + 2 * c, 2); want = md::bf16_to_float(h); break;
                    case weight_form::f16: std::memcpy(&h, row + 2 * c, 2); want = md::f16_to_float(h); break;
                    case weight_form::fp8_e4m3:
                        want = md::e4m3_to_float(row[c]) * md::e8m0_to_float(s.scales[size_t((r / 16) * 4 + c / 16)]);
                        break;
                    case weight_form::fp4_e2m1:
                        want = md::e2m1_to_float(c % 2 ? row[c / 2] >> 4 : row[c / 2] & 0xf) *
                               md::e8m0_to_float(s.scales[size_t(r * 2 + c / 32)]);
                        break;
                    default: break;
                }
                CHECK(s.m.at(r, c) == want);
            }
    }
}

// Whether this CPU can run the AVX-512 table (a test must not call it where it would fault).
static bool avx512_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return tandem::cpu::detail::avx512_kernels() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

// The AVX-512 table's tile on `rows` random rows of x against all of m's outputs: the scalar bits?
static bool avx512_tile_gives_scalar_bits(const weight_matrix& m, int64_t rows, std::mt19937& rng) {
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(rows * m.cols));
    for (auto& v : x) v = nd(rng);
    std::vector<float> want(static_cast<size_t>(rows * m.rows)), got(want.size(), -3.0f);
    detail::scalar_kernels().tile(x.data(), m.cols, rows, m, 0, m.rows, want.data(), m.rows);
    detail::avx512_kernels()->tile(x.data(), m.cols, rows, m, 0, m.rows, got.data(), m.rows);
    return same_bits(got.data(), want.data(), got.size());
}

TEST_CASE("cpu weights: stored forms match their fp32 expansion bitwise, any batch, thread count or ISA") {
    const form_case cases[] = {{weight_form::f32, scale_form::none, 1},      {weight_form::bf16, scale_form::none, 1},
                               {weight_form::f16, scale_form::none, 1},      {weight_form::fp8_e4m3, scale_form::e8m0, 128},
                               {weight_form::fp8_e4m3, scale_form::e8m0, 16}, {weight_form::fp8_e4m3, scale_form::f32, 32},
                               {weight_form::fp4_e2m1, scale_form::e8m0, 32}};
    thread_pool one(1), two(2), three(3);
    const auto* avx2 = detail::avx2_kernels();
    const auto* avx512 = detail::avx512_kernels();
    const auto& scalar = detail::scalar_kernels();
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    for (const auto& fc : cases) {
        // 4, 11 and 16 rows: every register block of the AVX2 tile (6 × 2, 4 × 3, 3 × 4, 2 × 4, 1 × 8).
        for (int64_t cols : {8, 38, 64, 200, 256}) for (int64_t rows : {4, 11, 16}) {
            CAPTURE(weight_form_name(fc.form));
            CAPTURE(fc.block);
            CAPTURE(cols);
            CAPTURE(rows);
            const int64_t out = 37;
            stored s = make_stored(fc.form, fc.scale, out, cols, fc.block, uint64_t(cols) * 7 + fc.block);
            const std::vector<float> wf = expand(s.m);
            std::vector<float> x(static_cast<size_t>(rows * cols));
            for (auto& v : x) v = nd(rng);
            std::vector<float> batched(static_cast<size_t>(rows * out)), other(batched.size()), ref(batched.size());
            linear(two, x.data(), rows, cols, s.m, batched.data(), out);
            linear(three, x.data(), rows, cols, wf.data(), cols, out, ref.data(), out);
            CHECK(same_bits(batched.data(), ref.data(), batched.size()));
            // Every instruction set computes the same bits.
            scalar.tile(x.data(), cols, rows, s.m, 0, out, other.data(), out);
            CHECK(same_bits(batched.data(), other.data(), batched.size()));
            if (avx2) {
                avx2->tile(x.data(), cols, rows, s.m, 0, out, other.data(), out);
                CHECK(same_bits(batched.data(), other.data(), batched.size()));
            }
            // The AVX-512 tile (row pairs in one register) where the CPU has it; 1 and 2 rows too.
            if (avx512_cpu()) {
                avx512->tile(x.data(), cols, rows, s.m, 0, out, other.data(), out);
                CHECK(same_bits(batched.data(), other.data(), batched.size()));
                for (int64_t few : {1, 2, 3}) {
                    std::vector<float> part(static_cast<size_t>(few * out));
                    avx512->tile(x.data(), cols, few, s.m, 0, out, part.data(), out);
                    CHECK(same_bits(batched.data(), part.data(), part.size()));
                }
            }
            // A row alone, and a slice of the outputs, give the bits it gets in the batch.
            for (int64_t r = 0; r < rows; ++r) {
                std::vector<float> alone(static_cast<size_t>(out));
                linear(one, &x[r * cols], 1, cols, s.m, alone.data(), out);
                CHECK(same_bits(alone.data(), &batched[r * out], size_t(out)));
                for (int64_t o = 0; o < out; ++o) CHECK(alone[o] == dot(&x[r * cols], &wf[o * cols], cols));
            }
            std::vector<float> part(static_cast<size_t>(rows * 20));
            linear(two, x.data(), rows, cols, s.m.slice_rows(17, 20), part.data(), 20);
            for (int64_t r = 0; r < rows; ++r) CHECK(same_bits(&part[r * 20], &batched[r * out + 17], 20));
            // Close to a double-precision product (the decode is right, not just consistent).
            double worst = 0;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t o = 0; o < out; ++o) {
                    double acc = 0, abs_sum = 1e-300;
                    for (int64_t k = 0; k < cols; ++k) {
                        acc += double(x[r * cols + k]) * wf[o * cols + k];
                        abs_sum += std::fabs(double(x[r * cols + k]) * wf[o * cols + k]);
                    }
                    worst = std::max(worst, std::fabs(acc - batched[r * out + o]) / abs_sum);
                }
            CHECK(worst < 1e-5);
        }
    }
}

TEST_CASE("cpu weights: the SIMD tiles' page-strided output groups give the scalar bits, any block") {
    // Rows shorter than 4 KB are read in groups of outputs one page apart (kernels_avx2.cpp,
    // pairs_across_outputs and across_outputs, the GEMV too): blocks that start mid-matrix, hold
    // several such groups and end in a remainder must still write every output once, at its own
    // place, with the scalar bits. AVX2 wherever this build has it, AVX-512 where the CPU has it.
    const auto& scalar = detail::scalar_kernels();
    std::vector<const detail::kernel_table*> tiles;
    if (detail::avx2_kernels()) tiles.push_back(detail::avx2_kernels());
    if (avx512_cpu()) tiles.push_back(detail::avx512_kernels());
    if (tiles.empty()) return;
    const form_case cases[] = {{weight_form::f32, scale_form::none, 1}, {weight_form::bf16, scale_form::none, 1},
                               {weight_form::f16, scale_form::none, 1}, {weight_form::fp8_e4m3, scale_form::e8m0, 128},
                               {weight_form::fp4_e2m1, scale_form::e8m0, 32}};
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    const int64_t out = 700, cols = 256;  // row bytes 1 KB (f32) down to 128 B (fp4): 4–32 rows a page
    for (const auto& fc : cases) {
        stored s = make_stored(fc.form, fc.scale, out, cols, fc.block, 77);
        // AVX-512: FP4 1-8 rows and FP8 1-4 in registers, more in the scratch GEMM (every form from 16)
        for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 16, 19}) {
            std::vector<float> x(static_cast<size_t>(rows * cols));
            for (auto& v : x) v = nd(rng);
            for (auto [o0, o1] : {std::pair<int64_t, int64_t>{0, out}, {13, 611}, {192, 384}})
                for (const detail::kernel_table* t : tiles) {
                    CAPTURE(t->name);
                    CAPTURE(weight_form_name(fc.form));
                    CAPTURE(rows);
                    CAPTURE(o0);
                    const int64_t ys = o1 - o0 + 5;  // a sentinel gap after each row's outputs
                    std::vector<float> want(static_cast<size_t>(rows * ys), -7.0f), got(want.size(), -7.0f);
                    scalar.tile(x.data(), cols, rows, s.m, o0, o1, want.data(), ys);
                    t->tile(x.data(), cols, rows, s.m, o0, o1, got.data(), ys);
                    CHECK(same_bits(got.data(), want.data(), got.size()));
                }
        }
    }
}

TEST_CASE("cpu weights: the AVX-512 scratch GEMM's column chunks, row blocks and partial groups keep the scalar bits") {
    // gemm_avx512.cpp decodes 512-column chunks (a scale group may straddle two: FP8 blocks of 96)
    // and keeps the accumulators in memory between them, splits the rows into blocks of at most
    // three, groups 16 consecutive outputs and fills a group of fewer than 16 with repeats, and
    // decodes a scaled form's pairs four at a time when its rows are a multiple of 4 KB: columns
    // past one chunk (with and without a tail that is not a multiple of 8), 4096 columns (FP8's
    // 4 KB rows), every block split from 4 to 19 rows, output counts that end in a partial group.
    if (!avx512_cpu()) return;
    const form_case cases[] = {{weight_form::f32, scale_form::none, 1},       {weight_form::bf16, scale_form::none, 1},
                               {weight_form::f16, scale_form::none, 1},       {weight_form::fp8_e4m3, scale_form::e8m0, 128},
                               {weight_form::fp8_e4m3, scale_form::f32, 96},  {weight_form::fp4_e2m1, scale_form::e8m0, 32}};
    std::mt19937 rng(13);
    for (const auto& fc : cases)
        for (int64_t cols : {1024, 1030, 1536, 4096})
            for (int64_t out : {13, 40, 136}) {
                stored s = make_stored(fc.form, fc.scale, out, cols, fc.block, uint64_t(cols) + out);
                for (int64_t rows : {4, 7, 8, 13, 16, 19}) {
                    CAPTURE(weight_form_name(fc.form));
                    CAPTURE(cols);
                    CAPTURE(out);
                    CAPTURE(rows);
                    CHECK(avx512_tile_gives_scalar_bits(s.m, rows, rng));
                }
            }
}

TEST_CASE("cpu weights: FP4 with every E8M0 scale code gives the scalar bits (the AVX-512 kernels' table per code)") {
    // few_rows_avx512.cpp and gemm_avx512.cpp read an FP4 scale group's signed values · scale from
    // a table made once per code; code 0 (2^-127: subnormal products) to 254 must give the bits the
    // scalar decode forms, at 1-8 rows (registers: 4 pairs up to 4 rows, 2 pairs from 5) and 9+ (scratch).
    if (!avx512_cpu()) return;
    const int64_t out = 24, cols = 256;
    stored s = make_stored(weight_form::fp4_e2m1, scale_form::e8m0, out, cols, 32, 21);
    // Each output row one code for all its groups (row 0: code 0, so its sums are subnormal products
    // alone), the codes spread over 0..254; the last rows mix codes across groups.
    for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < s.m.scale_cols; ++c)
            s.scales[size_t(r * s.m.scale_cols + c)] = static_cast<uint8_t>(r < 20 ? (r * 13) % 255 : (r * 37 + c * 91) % 255);
    std::mt19937 rng(17);
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 16}) {
        CAPTURE(rows);
        CHECK(avx512_tile_gives_scalar_bits(s.m, rows, rng));
    }
}

TEST_CASE("cpu weights: FP8 at few rows with the scale folded into x keeps the scalar bits on both decode routes") {
    // few_rows_avx512.cpp multiplies x by 2^(e + 8) or 2^(e + 120) (the fp16 and fp32 routes) and
    // fmas the codes unscaled when a scale group's outputs share one E8M0 code and that product is
    // exact for the call's x; else it takes the scaled path. Edges: scale codes 0 (2^-127) to 134
    // (2^7, the loader's bound), x far above 1 and down among the subnormals, inf, zeros; block
    // heights 128, 24, 16 and 8 (the loader's multiples of 8), and a view starting at row 3, whose
    // output groups straddle two scale rows.
#if defined(__x86_64__) && defined(__GNUC__)
    if (!avx512_cpu()) return;
    const int64_t out = 40, cols = 4104;  // a tail of 8 columns past the last block of 128
    std::mt19937 rng(23);
    std::normal_distribution<float> nd;
    for (int64_t block : {128, 24, 16, 8}) {
        stored s = make_stored(weight_form::fp8_e4m3, scale_form::e8m0, out, cols, block, uint64_t(block) * 3);
        for (size_t i = 0; i < s.scales.size(); ++i) {
            const uint8_t edges[] = {0, 1, 7, 60, 110, 127, 130, 134};
            s.scales[i] = i % 3 == 0 ? edges[(i / 3) % 8] : static_cast<uint8_t>(100 + rng() % 35);
        }
        for (int x_kind = 0; x_kind < 6; ++x_kind)
            for (int64_t rows : {1, 2, 3, 4}) {
                CAPTURE(block);
                CAPTURE(x_kind);
                CAPTURE(rows);
                std::vector<float> x(static_cast<size_t>(rows * cols));
                for (auto& v : x) v = nd(rng);
                if (x_kind == 1) x[7] = std::ldexp(1.5f, 100);        // folds only where 2^j is small
                if (x_kind == 2) x[x.size() - 20] = 1e-40f;            // a subnormal: folds only for j ≥ 0
                if (x_kind == 3) x[3] = std::ldexp(1.0f, -120);       // normal, but not after 2^-10
                if (x_kind == 4) std::fill(x.begin(), x.end(), 0.0f);  // any power of two is exact
                if (x_kind == 5) x[11] = INFINITY;                     // no fold at all
                for (const weight_matrix& m : {s.m, s.m.slice_rows(3, out - 3)}) {
                    CAPTURE(m.row0);
                    std::vector<float> want(static_cast<size_t>(rows * m.rows)), got(want.size());
                    detail::scalar_kernels().tile(x.data(), cols, rows, m, 0, m.rows, want.data(), m.rows);
                    for (auto route : {detail::fp8_decode_route::via_fp16, detail::fp8_decode_route::via_fp32}) {
                        std::fill(got.begin(), got.end(), -3.0f);
                        detail::few_rows_avx512(x.data(), cols, rows, m, 0, m.rows, got.data(), m.rows, route);
                        CHECK(same_bits(got.data(), want.data(), got.size()));
                    }
                }
            }
    }
#endif
}

TEST_CASE("cpu weights: a linear_group gives each job the bits of its own linear, any thread count") {
    // Jobs of every form, row counts from 1 (a decode row routed to an expert) to 70 (more than
    // one row tile), some empty, outputs written at strides inside shared buffers.
    const weight_form forms[] = {weight_form::f32, weight_form::bf16, weight_form::f16, weight_form::fp8_e4m3,
                                 weight_form::fp4_e2m1};
    const int64_t rows_of[] = {1, 4, 0, 70, 2, 17};
    const int64_t cols = 96, out = 50;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<stored> mats;
    for (int i = 0; i < 6; ++i) mats.push_back(make_stored(forms[i % 5], scale_form::e8m0, out, cols, 32, 40 + i));
    int64_t total_rows = 0;
    for (int64_t r : rows_of) total_rows += r;
    std::vector<float> x(static_cast<size_t>(total_rows * cols));
    for (auto& v : x) v = nd(rng);
    const int64_t y_stride = out + 3;  // outputs land inside wider rows, like a gathered buffer
    std::vector<float> want(static_cast<size_t>(total_rows * y_stride), -1.0f);
    thread_pool one(1);
    std::vector<linear_job> jobs;
    int64_t row0 = 0;
    for (int i = 0; i < 6; ++i) {
        linear(one, &x[row0 * cols], rows_of[i], cols, mats[size_t(i)].m, &want[row0 * y_stride], y_stride);
        jobs.push_back({&x[row0 * cols], rows_of[i], cols, mats[size_t(i)].m, nullptr, y_stride});
        row0 += rows_of[i];
    }
    for (int threads : {1, 2, 3}) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::vector<float> got(want.size(), -1.0f);
        row0 = 0;
        for (size_t i = 0; i < jobs.size(); ++i) {
            jobs[i].y = &got[row0 * y_stride];
            row0 += rows_of[i];
        }
        linear_group(pool, jobs);
        CHECK(same_bits(got.data(), want.data(), got.size()));  // the padding columns untouched too
    }
}

TEST_CASE("cpu weights: linear's work units hold whole output groups of every tile, ~96 KB of weights each") {
    // The tiles group outputs by 8 (GEMVs), 2 / 3 / 4 (AVX2 blocks), 4 / 6 / 8 (AVX-512 tile) and
    // 16 (scratch GEMM): a unit that ends inside a group runs the rest one output at a time (a
    // single fma chain) or repeats outputs. V4-Flash's lm head (bf16, K = 4096: 8 KB rows) and its
    // FP8 linears at K = 4096 / 8192 got 12- and 24-output units before.
    const weight_form forms[] = {weight_form::f32, weight_form::bf16, weight_form::f16, weight_form::fp8_e4m3,
                                 weight_form::fp4_e2m1};
    for (weight_form f : forms)
        for (int64_t cols : {64, 256, 512, 1024, 2048, 4096, 7168, 8192, 16384, 65536}) {
            weight_matrix m;
            m.form = f;
            m.rows = 1 << 20;
            m.cols = cols;
            const int64_t block = detail::output_block(m);
            CAPTURE(weight_form_name(f));
            CAPTURE(cols);
            CHECK(block % 48 == 0);
            CHECK(block >= 48);
            CHECK(block <= 384);
            // As close to 96 KB as whole 48-output steps allow (at least 48 outputs however wide).
            if (block > 48) CHECK(block * m.row_bytes() <= (96 << 10));
            if (block < 384) CHECK((block + 48) * m.row_bytes() > (96 << 10));
        }
}

TEST_CASE("cpu weights: amx_fits takes BF16, FP8 and FP4 whose decoded values are exact in bf16, nothing else") {
    // Forms: BF16, FP8 and FP4 with E8M0 scales (always powers of two) fit; F32 and F16 do not
    // (their values have more significant bits than bf16 holds).
    CHECK(amx_fits(make_stored(weight_form::bf16, scale_form::none, 4, 64, 0, 1).m));
    CHECK(amx_fits(make_stored(weight_form::fp8_e4m3, scale_form::e8m0, 4, 256, 128, 2).m));
    CHECK(amx_fits(make_stored(weight_form::fp4_e2m1, scale_form::e8m0, 4, 64, 32, 3).m));
    CHECK_FALSE(amx_fits(make_stored(weight_form::f32, scale_form::none, 4, 64, 0, 4).m));
    CHECK_FALSE(amx_fits(make_stored(weight_form::f16, scale_form::none, 4, 64, 0, 5).m));
    // K must fill whole tile rows of 32.
    CHECK_FALSE(amx_fits(make_stored(weight_form::bf16, scale_form::none, 4, 48, 0, 6).m));
    // A tile row's 32 columns must share one scale: FP8 blocks 16 wide do not.
    CHECK_FALSE(amx_fits(make_stored(weight_form::fp8_e4m3, scale_form::e8m0, 4, 64, 16, 7).m));
    // F32 scales: only ±2^e and 0 keep e4m3 · scale a 4-bit significand.
    stored f = make_stored(weight_form::fp8_e4m3, scale_form::f32, 256, 256, 128, 8);
    CHECK_FALSE(amx_fits(f.m));  // make_stored's f32 scales are 1.xxx · 2^-e
    const float exact[] = {0.25f, -2.0f, 0.0f, std::ldexp(1.0f, -100)};
    std::memcpy(f.scales.data(), exact, sizeof exact);
    CHECK(amx_fits(f.m));
    // One scale off a power of two refuses the matrix — but only in rows the view uses.
    const float off = 0.3f, denormal = std::ldexp(1.0f, -130), inf = INFINITY;
    for (const float bad : {off, denormal, inf}) {
        std::memcpy(f.scales.data() + 4 * 3, &bad, 4);  // block row 1, block column 1
        CHECK_FALSE(amx_fits(f.m));
        CHECK(amx_fits(f.m.slice_rows(0, 128)));
        CHECK_FALSE(amx_fits(f.m.slice_rows(100, 60)));
    }
}
