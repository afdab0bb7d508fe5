// bench/model/machine_limits.h — the machine's own ceilings, measured in the benchmark's run, that
// model throughput is divided by:
//   fma_peak        fp32 FLOP/s with enough independent FMA chains on every thread to keep every
//                   FMA pipe busy (12 chains of 8 lanes: latency 4 × 2 pipes needs 8)
//   theoretical     cores × lanes × FMA pipes × 2 × clock, from the CPU's reported clock
//   read_bandwidth  STREAM-like read-only sum over a buffer far larger than the last-level cache
//                   (what a memory-bound GEMV does: stream weights, write almost nothing)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"

namespace tandem::bench {

struct fma_peak_result {
    double measured_flops = 0;    // best of the rounds
    double theoretical_flops = 0;  // 0 when the clock is unknown
    std::string theoretical_formula;
    std::string isa;  // "avx2+fma" or "scalar"
};

fma_peak_result measure_fma_peak(cpu::thread_pool& pool);

// The scratch GEMM's own FMA loop on every thread at once (cpu::detail::gemm_fma_loop_avx512: its
// register blocks over L1-resident decoded weights and an L2-resident x tile, nothing else), FLOP/s,
// best of three rounds: the ceiling the GEMM's instruction mix allows on this core, below the FMA
// peak by what its loads cost. 0 unless the AVX-512 table is active (x86-64).
double measure_gemm_fma_loop(cpu::thread_pool& pool);

struct bandwidth_result {
    double read_bytes_per_s = 0;  // best of the rounds
    int64_t buffer_bytes = 0;
};

// The last-level cache's size in bytes as the kernel reports it (sysfs, the highest cache level
// of cpu0), 0 when unknown. A VM reports its host socket's cache: 480 MiB on one Xeon 6 VM here.
int64_t last_level_cache_bytes();

// The read-bandwidth buffer: at least four times the last-level cache and never under 512 MiB.
// Why: a fixed 512 MiB was 16x the L3 of the machines it was chosen on, but on a VM reporting a
// 480 MiB L3 the sum read partly from cache, and every "of read bandwidth" ratio meant nothing.
int64_t bandwidth_buffer_bytes();

bandwidth_result measure_read_bandwidth(cpu::thread_pool& pool, int64_t buffer_bytes = bandwidth_buffer_bytes());

// The same read-only sum over a buffer allocated and touched once, for measuring the bandwidth
// again right before and after each memory-bound figure. Why: on a shared machine the bandwidth
// itself swings (this VM: 25-49 GB/s between runs minutes apart, other tenants on the memory
// bus), so the best decode round divided by the best bandwidth round can pair a busy moment with
// a quiet one. A figure divided by the bandwidth measured around it (paired) says what share of
// the bandwidth then available it used; the median over rounds is what the benchmarks report
// beside the best ÷ best ratio.
class read_bandwidth_probe {
public:
    read_bandwidth_probe(cpu::thread_pool& pool, int64_t buffer_bytes);

    // Bytes per second: the best of `passes` sums over the whole buffer.
    double measure(int passes);
    // Runs figure() between two measure(passes) and returns the mean of the two: the bandwidth
    // the figure's moment had.
    template <class F>
    double around(int passes, F&& figure) {
        const double before = measure(passes);
        figure();
        return 0.5 * (before + measure(passes));
    }
    // The best of every measurement so far (the best ÷ best baseline).
    double best() const { return best_; }
    int64_t buffer_bytes() const { return bytes_; }

private:
    int threads_;
    int64_t bytes_;
    bool avx2_;
    // In 2 MiB pages where the kernel gives them (madvised, as the model's weight copy: a sum
    // over 4 KiB pages measures TLB misses as much as memory — model/file_bytes.h).
    struct huge_free {
        int64_t bytes;
        void operator()(float* p) const;
    };
    std::unique_ptr<float[], huge_free> buf_;
    double best_ = 0;
};

// The median of a non-empty set of per-round figures (the mean of the middle two for an even count).
double median_of(std::vector<double> v);

// The CPU clock in Hz (cpufreq's maximum, else /proc/cpuinfo's "cpu MHz"), 0 when unknown.
double cpu_clock_hz(std::string* source);

}  // namespace tandem::bench
