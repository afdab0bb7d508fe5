// bench/model/bench_kernels.cpp — the CPU linear kernels on every stored weight form, each figure
// divided by a ceiling measured in the same run (machine_limits.h):
//   GEMV (1 row, matrix far larger than the caches): weight bytes read per second ÷ read bandwidth
//   GEMM (--rows rows, matrix of a few MB):           FLOP/s ÷ FMA peak
// Best of --rounds rounds (3 GEMV and 5 GEMM calls each), interleaved over the forms (the dev
// machines are shared and noisy). The GEMV is also given paired: each round's best call ÷ the
// read bandwidth measured just before and just after that form's calls, median over rounds (a
// shared VM's bandwidth swings between rounds; see read_bandwidth_probe in machine_limits.h).
// --cols sets K (1024: `small`'s rows; 4096: V4-Flash's d, whose 8 KB rows stream differently).
// --cpu-matmul amx runs the forms the AMX tiles take (BF16, FP8, FP4: cpu/amx.h) on the tiles, as
// backend.cpu_matmul = "amx" does; F32 and F16 stay on the exact kernels (the table says which).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/amx.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "machine_limits.h"

namespace {

using clock_type = std::chrono::steady_clock;
using tandem::cpu::scale_form;
using tandem::cpu::weight_form;
using tandem::cpu::weight_matrix;

const char* k_usage =
    "usage: bench_kernels [--threads N] [--gemv-mib N] [--rows N] [--cols N] [--rounds N] [--cpu-matmul exact|amx]\n"
    "  --threads N    worker threads (default: all cores)\n"
    "  --gemv-mib N   stored size of each GEMV matrix (default: the read-bandwidth buffer, 4x the last-level cache, at least 512)\n"
    "  --rows N       GEMM rows (default 128)\n"
    "  --cols N       K, the matrices' columns, a multiple of 128 (default 1024)\n"
    "  --rounds N     rounds, best kept (default 3)\n"
    "  --cpu-matmul M exact (default) or amx: BF16 / FP8 / FP4 on AMX tiles, as backend.cpu_matmul\n";

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A [rows, cols] matrix of random codes in `form` (scales near 2^-7), owning its bytes.
struct owned_matrix {
    std::vector<uint8_t> bytes, scales;
    weight_matrix m;
    owned_matrix(weight_form form, int64_t rows, int64_t cols, bool tiles) {
        m.form = form;
        m.rows = rows;
        m.cols = cols;
        bytes.resize(static_cast<size_t>(m.row_bytes() * rows));
        std::mt19937_64 rng(7);
        for (size_t i = 0; i < bytes.size(); i += 8) {
            const uint64_t v = rng();
            std::memcpy(&bytes[i], &v, std::min<size_t>(8, bytes.size() - i));
        }
        // f32 / bf16: magnitudes in [2^-15, 2), as trained weights are. Fully random exponents
        // (the former top-bit mask) spread values over 2^-127..2 and made ~1% of the products fp32
        // subnormals; on Intel cores each costs a microcode assist, so the figure measured the
        // assists (f32 and bf16 GEMM at 0.06 of the FMA peak), not the kernel. Halves are
        // normal fp32 whatever their code. e4m3: every code but NaN, subnormals included (the
        // kernel's decode never forms an fp32 subnormal, see kernels_avx2.cpp).
        auto realistic_top_byte = [](uint8_t b) { return static_cast<uint8_t>((b & 0x80) | 0x38 | (b & 0x07)); };
        if (form == weight_form::f32)
            for (size_t i = 3; i < bytes.size(); i += 4) bytes[i] = realistic_top_byte(bytes[i]);
        if (form == weight_form::bf16)
            for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] = realistic_top_byte(bytes[i]);
        if (form == weight_form::fp8_e4m3)
            for (auto& b : bytes) b &= 0xbf;
        if (form == weight_form::fp8_e4m3 || form == weight_form::fp4_e2m1) {
            const bool fp4 = form == weight_form::fp4_e2m1;
            m.block_rows = fp4 ? 1 : 128;
            m.block_cols = fp4 ? 32 : 128;
            m.scale_cols = (cols + m.block_cols - 1) / m.block_cols;
            m.scale = scale_form::e8m0;
            scales.assign(static_cast<size_t>((rows + m.block_rows - 1) / m.block_rows * m.scale_cols), 120);
            m.scales = scales.data();
        }
        m.data = bytes.data();
        if (tiles && tandem::cpu::amx_fits(m)) tandem::cpu::mark_for_tiles(m);
    }
    int64_t stored_bytes() const { return int64_t(bytes.size() + scales.size()); }
};

}  // namespace

int main(int argc, char** argv) {
    int threads = 0;
    int64_t gemv_mib = tandem::bench::bandwidth_buffer_bytes() >> 20, rows = 128, rounds = 3, K = 1024;
    bool tiles = false;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        if (k == "--help" || k == "-h") { std::fputs(k_usage, stdout); return 0; }
        if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n%s", k.c_str(), k_usage); return 2; }
        std::string v = argv[++i];
        if (k == "--threads") threads = std::atoi(v.c_str());
        else if (k == "--gemv-mib") gemv_mib = std::atoll(v.c_str());
        else if (k == "--rows") rows = std::atoll(v.c_str());
        else if (k == "--cols") K = std::atoll(v.c_str());
        else if (k == "--rounds") rounds = std::atoll(v.c_str());
        else if (k == "--cpu-matmul") {
            if (v != "exact" && v != "amx") {
                std::fprintf(stderr, "--cpu-matmul: want exact or amx, not %s\n%s", v.c_str(), k_usage);
                return 2;
            }
            tiles = v == "amx";
        }
        else { std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), k_usage); return 2; }
    }
    if (gemv_mib < 1 || rows < 1 || rounds < 1 || K < 128 || K % 128 != 0) { std::fprintf(stderr, "%s", k_usage); return 2; }
    if (tiles && !tandem::cpu::amx_bf16_available()) {
        std::fprintf(stderr, "--cpu-matmul amx: this process cannot run AMX-BF16 tiles (CPU, kernel or TANDEM_CPU_KERNELS)\n");
        return 2;
    }
    tandem::cpu::thread_pool pool(threads);
    tandem::bench::fma_peak_result peak;
    double gemm_loop = 0;  // the scratch GEMM's own FMA loop (0 without the AVX-512 table)
    tandem::bench::read_bandwidth_probe probe(pool, tandem::bench::bandwidth_buffer_bytes());

    const weight_form forms[] = {weight_form::f32, weight_form::bf16, weight_form::f16, weight_form::fp8_e4m3,
                                 weight_form::fp4_e2m1};
    std::vector<double> gemv_best(5, 0), gemm_best(5, 0), gemv_bytes(5, 0);
    std::vector<std::vector<double>> gemv_paired(5);
    std::vector<bool> on_tiles(5, false);  // the form ran on the AMX tiles
    std::vector<float> x(static_cast<size_t>(rows * K), 0.5f);
    for (int64_t round = 0; round < rounds; ++round) {
        // Baselines every round, best kept (see bench_model_cpu.cpp).
        const auto p = tandem::bench::measure_fma_peak(pool);
        if (p.measured_flops > peak.measured_flops) peak = p;
        gemm_loop = std::max(gemm_loop, tandem::bench::measure_gemm_fma_loop(pool));
        probe.measure(5);
        for (int f = 0; f < 5; ++f) {
            {
                owned_matrix one_row(forms[f], 1, K, tiles);
                const int64_t out = (gemv_mib << 20) / one_row.m.row_bytes();
                owned_matrix big(forms[f], out, K, tiles);
                on_tiles[f] = big.m.amx_tiles;
                std::vector<float> y(static_cast<size_t>(out));
                tandem::cpu::linear(pool, x.data(), 1, K, big.m, y.data(), out);  // touch once
                gemv_bytes[f] = double(big.stored_bytes());
                double round_best = 0;
                const double bw = probe.around(2, [&] {
                    for (int rep = 0; rep < 3; ++rep) {
                        const auto t0 = clock_type::now();
                        tandem::cpu::linear(pool, x.data(), 1, K, big.m, y.data(), out);
                        round_best = std::max(round_best, gemv_bytes[f] / seconds_since(t0));
                    }
                });
                gemv_best[f] = std::max(gemv_best[f], round_best);
                gemv_paired[f].push_back(round_best / bw);
            }
            {
                const int64_t out = 4096;
                owned_matrix mid(forms[f], out, K, tiles);
                std::vector<float> y(static_cast<size_t>(rows * out));
                tandem::cpu::linear(pool, x.data(), rows, K, mid.m, y.data(), out);
                for (int rep = 0; rep < 5; ++rep) {
                    const auto t0 = clock_type::now();
                    tandem::cpu::linear(pool, x.data(), rows, K, mid.m, y.data(), out);
                    gemm_best[f] = std::max(gemm_best[f], 2.0 * double(rows * out * K) / seconds_since(t0));
                }
            }
        }
    }
    std::printf("kernels %s, threads %d, K %lld\n", tandem::cpu::kernel_isa(), pool.size(), (long long)K);
    std::printf("baseline: FMA peak %.1f GFLOP/s measured", peak.measured_flops / 1e9);
    if (peak.theoretical_flops > 0)
        std::printf(" (theoretical %.1f = %s)", peak.theoretical_flops / 1e9, peak.theoretical_formula.c_str());
    std::printf("; read bandwidth %.2f GB/s (sum over %lld MiB, best of every measurement); GEMV matrices %lld MiB\n",
                probe.best() / 1e9, (long long)(probe.buffer_bytes() >> 20), (long long)gemv_mib);
    if (gemm_loop > 0)
        std::printf("ceiling: the scratch GEMM's FMA loop alone (decoded weights in L1, no decode, reductions or "
                    "weight traffic) %.1f GFLOP/s = %.3f of the FMA peak\n",
                    gemm_loop / 1e9, gemm_loop / peak.measured_flops);
    std::printf("%-9s %-6s %10s %10s %14s %14s %12s\n", "form", "path", "GEMV GB/s", "÷ read bw", "÷ bw, paired",
                "GEMM GFLOP/s", "÷ FMA peak");
    for (int f = 0; f < 5; ++f) {
        std::printf("%-9s %-6s %10.2f %10.3f %14.3f %14.1f %12.3f\n", tandem::cpu::weight_form_name(forms[f]),
                    on_tiles[f] ? "amx" : "exact", gemv_best[f] / 1e9, gemv_best[f] / probe.best(),
                    tandem::bench::median_of(gemv_paired[f]), gemm_best[f] / 1e9, gemm_best[f] / peak.measured_flops);
    }
    if (tiles)
        std::printf("amx: GEMM FLOP/s count the fp32 multiply-adds (x's three bf16 parts are the tiles' own work), "
                    "divided by the same fp32 FMA peak\n");
    std::printf("÷ read bw: best GEMV ÷ best bandwidth; ÷ bw, paired: median over %lld rounds of each round's GEMV ÷ "
                "the bandwidth measured around it\n",
                (long long)rounds);
    return 0;
}
