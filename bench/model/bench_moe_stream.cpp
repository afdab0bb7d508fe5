// bench/model/bench_moe_stream.cpp — how fast a batched decode step's MoE streams its expert
// weights, divided by the read bandwidth measured in the same run (machine_limits.h).
//
// Why a bench of its own: in `small`'s batch-16 decode step the MoE reads every expert's weights
// (~200 MB) once per step through cpu::linear_group, a few rows per expert, and that read rate —
// not the FMAs — bounds the step ("Model benchmark" in README). This reproduces the MoE's shapes
// (default: `small`'s — 16 experts, each w1 and w3 [256, 1024] and w2 [1024, 256] in bf16, plus a
// shared expert on every row) over more layers than the last-level cache holds, with random
// weights, so the figure moves only with the kernels and the machine.
//
// Figures (best of --rounds, each round one pass over every layer):
//   grouped: w1 + w3 of every expert in one linear_group, then w2 — as model/moe.cpp runs them —
//            with --rows rows per routed expert and --batch rows on the shared expert
//   gemv:    the same, one row per expert and on the shared expert (batch-1 decode's shape)
// each as weight bytes read per second and ÷ the read bandwidth, with the cores the pass got.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "machine_limits.h"

namespace {

using clock_type = std::chrono::steady_clock;
using tandem::cpu::linear_job;
using tandem::cpu::weight_form;
using tandem::cpu::weight_matrix;

const char* k_usage =
    "usage: bench_moe_stream [--threads N] [--layers N] [--experts N] [--hidden N] [--inter N]\n"
    "                        [--rows N] [--batch N] [--rounds N]\n"
    "  --threads N  worker threads (default: all cores)\n"
    "  --layers N   MoE layers, each with its own weights (default 40: ~1 GB, beyond the caches)\n"
    "  --experts N  routed experts per layer (default 16)\n"
    "  --hidden N   model width d (default 1024)\n"
    "  --inter N    expert width (default 256)\n"
    "  --rows N     rows each routed expert gets in the grouped pass (default 4: batch 16, top-4)\n"
    "  --batch N    rows on the shared expert in the grouped pass (default 16)\n"
    "  --rounds N   rounds, best kept (default 3)\n";

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct figure {
    double bytes_per_s = 0, cores = 0;
};

}  // namespace

int main(int argc, char** argv) {
    int threads = 0;
    int64_t layers = 40, experts = 16, d = 1024, inter = 256, rows = 4, batch = 16, rounds = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (k == "--help" || k == "-h") {
            std::fputs(k_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "missing value for %s\n%s", k.c_str(), k_usage);
            return 2;
        }
        const long long v = std::atoll(argv[++i]);
        if (k == "--threads") threads = static_cast<int>(v);
        else if (k == "--layers") layers = v;
        else if (k == "--experts") experts = v;
        else if (k == "--hidden") d = v;
        else if (k == "--inter") inter = v;
        else if (k == "--rows") rows = v;
        else if (k == "--batch") batch = v;
        else if (k == "--rounds") rounds = v;
        else {
            std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), k_usage);
            return 2;
        }
    }
    if (layers < 1 || experts < 1 || d < 8 || inter < 8 || rows < 1 || batch < 1 || rounds < 1) {
        std::fprintf(stderr, "every count must be positive (widths at least 8)\n%s", k_usage);
        return 2;
    }
    tandem::cpu::thread_pool pool(threads);

    // Per layer and expert (the shared one last): w1, w2, w3, each inter × d bf16, contiguous.
    const int64_t mat = inter * d * 2, per_layer = (experts + 1) * 3 * mat;
    std::vector<uint8_t> w(static_cast<size_t>(layers * per_layer));
    std::mt19937_64 rng(3);
    // bf16 magnitudes in [2^-7, 2): normal products (an fp32 subnormal costs an Intel core a
    // microcode assist, which would measure the assists, not the stream).
    for (size_t i = 0; i + 1 < w.size(); i += 2) {
        const uint64_t r = rng();
        w[i] = static_cast<uint8_t>(r);
        w[i + 1] = static_cast<uint8_t>(0x3c | ((r >> 8) & 0x80) | ((r >> 16) & 0x03));
    }
    auto matrix = [&](int64_t l, int64_t e, int j, int64_t out, int64_t in) {
        weight_matrix m;
        m.form = weight_form::bf16;
        m.rows = out;
        m.cols = in;
        m.data = w.data() + l * per_layer + (e * 3 + j) * mat;
        return m;
    };
    const int64_t most = std::max(rows * experts, batch);
    std::vector<float> x(static_cast<size_t>(most * d), 0.25f), g(static_cast<size_t>(most * inter));
    std::vector<float> act(static_cast<size_t>(most * inter), 0.125f), y(static_cast<size_t>(most * d));
    std::vector<linear_job> jobs;

    // One pass over every layer with r rows per routed expert and s on the shared one.
    auto pass = [&](int64_t r, int64_t s) {
        for (int64_t l = 0; l < layers; ++l) {
            jobs.clear();
            for (int64_t e = 0; e < experts; ++e) {
                jobs.push_back({&x[e * r * d], r, d, matrix(l, e, 0, inter, d), &g[e * r * inter], inter});
                jobs.push_back({&x[e * r * d], r, d, matrix(l, e, 2, inter, d), &g[e * r * inter], inter});
            }
            jobs.push_back({x.data(), s, d, matrix(l, experts, 0, inter, d), g.data(), inter});
            jobs.push_back({x.data(), s, d, matrix(l, experts, 2, inter, d), g.data(), inter});
            tandem::cpu::linear_group(pool, jobs);
            jobs.clear();
            for (int64_t e = 0; e < experts; ++e)
                jobs.push_back({&act[e * r * inter], r, inter, matrix(l, e, 1, d, inter), &y[e * r * d], d});
            jobs.push_back({act.data(), s, inter, matrix(l, experts, 1, d, inter), y.data(), d});
            tandem::cpu::linear_group(pool, jobs);
        }
    };
    auto measure = [&](int64_t r, int64_t s, figure& best) {
        const double cpu0 = process_cpu_seconds();
        const auto t0 = clock_type::now();
        pass(r, s);
        const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
        const double bps = double(w.size()) / secs;
        if (bps > best.bytes_per_s) best = {bps, (process_cpu_seconds() - cpu0) / secs};
    };

    pass(1, 1);  // touch every page once
    tandem::bench::bandwidth_result bw;
    figure grouped, gemv;
    for (int64_t round = 0; round < rounds; ++round) {  // interleaved, so load drifts hit all three
        const auto b = tandem::bench::measure_read_bandwidth(pool, std::max(int64_t{1} << 30, tandem::bench::bandwidth_buffer_bytes()));
        if (b.read_bytes_per_s > bw.read_bytes_per_s) bw = b;
        measure(rows, batch, grouped);
        measure(1, 1, gemv);
    }
    std::printf("kernels %s, threads %d; %lld layers x (%lld experts + shared) x 3 bf16 [%lld x %lld]: %.0f MiB\n",
                tandem::cpu::kernel_isa(), pool.size(), static_cast<long long>(layers),
                static_cast<long long>(experts), static_cast<long long>(inter), static_cast<long long>(d),
                double(w.size()) / (1 << 20));
    std::printf("baseline: read bandwidth %.2f GB/s\n", bw.read_bytes_per_s / 1e9);
    std::printf("grouped (%lld rows per expert, %lld shared): %.2f GB/s = %.3f of read bandwidth (cores used %.2f)\n",
                static_cast<long long>(rows), static_cast<long long>(batch), grouped.bytes_per_s / 1e9,
                grouped.bytes_per_s / bw.read_bytes_per_s, grouped.cores);
    std::printf("gemv (1 row per expert and shared): %.2f GB/s = %.3f of read bandwidth (cores used %.2f)\n",
                gemv.bytes_per_s / 1e9, gemv.bytes_per_s / bw.read_bytes_per_s, gemv.cores);
    return 0;
}
