// bench/model/machine_limits.cpp — see machine_limits.h.
#include "machine_limits.h"

#include "cpu/kernels.h"
#include "cpu/kernels_internal.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BENCH_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace tandem::bench {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

constexpr int k_chains = 12;

#ifdef BENCH_AVX2
// 12 independent accumulators: each FMA's 4-cycle latency is hidden behind 11 others, so both
// FMA pipes issue every cycle. Returns a value depending on every chain so nothing is elided.
BENCH_AVX2 float fma_chains_avx2(int64_t iters, float seed) {
    __m256 acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_set1_ps(seed * float(c + 1));
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i)
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm256_add_ps(s, acc[c]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

// The same with 512-bit FMAs, for machines whose kernels run the AVX-512 tile (kernel_isa()
// "avx512f+fma"): a peak measured with ymm chains would be half what such a core can do.
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters, float seed) {
    __m512 acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_set1_ps(seed * float(c + 1));
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i)
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm512_add_ps(s, acc[c]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return out[0] + out[15];
}

BENCH_AVX2 double sum_avx2(const float* p, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    double s = 0;
    for (float v : out) s += v;
    for (; i < n; ++i) s += p[i];
    return s;
}
#endif

float fma_chains_scalar(int64_t iters, float seed) {
    float acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = seed * float(c + 1);
    for (int64_t i = 0; i < iters; ++i)
        for (int c = 0; c < k_chains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
    float s = 0;
    for (float v : acc) s += v;
    return s;
}

double sum_scalar(const float* p, int64_t n) {
    float a[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) a[l] += p[i + l];
    double s = 0;
    for (float v : a) s += v;
    for (; i < n; ++i) s += p[i];
    return s;
}

// One OS thread per pool thread, all started together: a pool's dynamic pieces could let one
// thread run two shares back to back, which would halve the figure.
template <typename F>
void on_every_thread(int threads, F&& fn) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&fn, t] { fn(t); });
    for (auto& t : ts) t.join();
}

// Best over `rounds` of Σ work(t) (FLOPs, every thread at once) ÷ the round's wall seconds.
template <typename F>
double best_rate_on_every_thread(int threads, int rounds, F&& work) {
    double best = 0;
    std::vector<double> done(static_cast<size_t>(threads), 0);
    for (int round = 0; round < rounds; ++round) {
        auto t0 = clock_type::now();
        on_every_thread(threads, [&](int t) { done[static_cast<size_t>(t)] = work(t); });
        const double s = seconds_since(t0);
        double total = 0;
        for (double d : done) total += d;
        best = std::max(best, total / s);
    }
    return best;
}

bool have_avx2() {
#ifdef BENCH_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

}  // namespace

double cpu_clock_hz(std::string* source) {
    {
        std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
        double khz = 0;
        if (f >> khz && khz > 0) {
            if (source) *source = "cpufreq max";
            return khz * 1e3;
        }
    }
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
        if (line.rfind("cpu MHz", 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const double mhz = std::atof(line.c_str() + colon + 1);
        if (mhz > 0) {
            if (source) *source = "/proc/cpuinfo cpu MHz";
            return mhz * 1e6;
        }
    }
    return 0;
}

fma_peak_result measure_fma_peak(cpu::thread_pool& pool) {
    fma_peak_result r;
    const bool avx2 = have_avx2();
    // The peak of the instruction set the kernels run: ymm chains for the AVX2 table, zmm chains
    // when the AVX-512 tile is active (twice the lanes; on a core with one 512-bit FMA pipe the
    // measured figure shows it).
    const bool avx512 = avx2 && std::strncmp(cpu::kernel_isa(), "avx512", 6) == 0;
    r.isa = avx512 ? "avx512f+fma" : avx2 ? "avx2+fma" : "scalar";
    const int threads = pool.size();
    const int64_t iters = avx2 ? 40'000'000 : 10'000'000;
    const int lanes = avx512 ? 16 : avx2 ? 8 : 1;
    std::vector<float> sink(static_cast<size_t>(threads) * 16, 0.0f);
    const double flops_per_thread = 2.0 * lanes * k_chains * double(iters);
    r.measured_flops = best_rate_on_every_thread(threads, 3, [&](int t) {
        float& out = sink[static_cast<size_t>(t * 16)];
#ifdef BENCH_AVX2
        if (avx512) out += fma_chains_avx512(iters, 1.0f + float(t));
        else if (avx2) out += fma_chains_avx2(iters, 1.0f + float(t));
        else out += fma_chains_scalar(iters, 1.0f + float(t));
#else
        out += fma_chains_scalar(iters, 1.0f + float(t));
#endif
        return flops_per_thread;
    });
    double guard = 0;
    for (float v : sink) guard += v;
    if (guard == 0) std::abort();
    std::string source;
    const double hz = cpu_clock_hz(&source);
    // FMA pipes per core: two 256-bit ones on Zen 2/3/4, Haswell and later; two 512-bit ones on
    // the Xeons this AVX-512 tile was written for (Zen 4 has none: its zmm FMAs are double-pumped,
    // which the measured figure shows).
    const int pipes = 2;
    if (hz > 0) {
        r.theoretical_flops = double(threads) * lanes * pipes * 2.0 * hz;
        r.theoretical_formula = fmt::format("{} threads × {} lanes × {} FMA pipes × 2 × {:.2f} GHz ({})", threads,
                                            lanes, pipes, hz / 1e9, source);
    }
    return r;
}

double measure_gemm_fma_loop(cpu::thread_pool& pool) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (std::strncmp(cpu::kernel_isa(), "avx512", 6) != 0) return 0;
    const int64_t repeats = 4000;  // ~0.25 s a round on one core at the loop's speed
    return best_rate_on_every_thread(pool.size(), 3, [&](int) { return cpu::detail::gemm_fma_loop_avx512(repeats); });
#else
    (void)pool;
    return 0;
#endif
}

namespace {

float* huge_pages_of(int64_t bytes) {
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    (void)::madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
    return static_cast<float*>(p);
}

}  // namespace

void read_bandwidth_probe::huge_free::operator()(float* p) const { ::munmap(p, static_cast<size_t>(bytes)); }

read_bandwidth_probe::read_bandwidth_probe(cpu::thread_pool& pool, int64_t buffer_bytes)
    : threads_(pool.size()), bytes_(buffer_bytes / 4 * 4), avx2_(have_avx2()),
      buf_(huge_pages_of(bytes_), huge_free{bytes_}) {
    const int64_t n = bytes_ / 4;
    on_every_thread(threads_, [&](int t) {  // first touch by the thread that will read it
        for (int64_t i = n * t / threads_; i < n * (t + 1) / threads_; ++i) buf_[i] = 1.0f;
    });
}

double read_bandwidth_probe::measure(int passes) {
    const int64_t n = bytes_ / 4;
    std::vector<double> partial(static_cast<size_t>(threads_) * 8, 0.0);
    double best = 0;
    for (int pass = 0; pass < passes; ++pass) {
        auto t0 = clock_type::now();
        on_every_thread(threads_, [&](int t) {
            const int64_t i0 = n * t / threads_, i1 = n * (t + 1) / threads_;
#ifdef BENCH_AVX2
            if (avx2_) {
                partial[static_cast<size_t>(t * 8)] = sum_avx2(buf_.get() + i0, i1 - i0);
                return;
            }
#endif
            partial[static_cast<size_t>(t * 8)] = sum_scalar(buf_.get() + i0, i1 - i0);
        });
        const double s = seconds_since(t0);
        double total = 0;
        for (double v : partial) total += v;
        if (total != double(n)) std::abort();  // every element was read
        best = std::max(best, double(bytes_) / s);
    }
    best_ = std::max(best_, best);
    return best;
}

int64_t last_level_cache_bytes() {
    int best_level = 0;
    int64_t best_bytes = 0;
    for (int index = 0; index < 16; ++index) {
        const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", index);
        std::ifstream level_file(dir + "level"), size_file(dir + "size");
        int level = 0;
        std::string size;
        if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
        int64_t bytes = std::atoll(size.c_str());
        if (size.back() == 'K') bytes <<= 10;
        else if (size.back() == 'M') bytes <<= 20;
        if (level > best_level || (level == best_level && bytes > best_bytes)) best_level = level, best_bytes = bytes;
    }
    return best_bytes;
}

int64_t bandwidth_buffer_bytes() {
    const int64_t mib = int64_t{1} << 20;
    const int64_t wanted = std::max(512 * mib, 4 * last_level_cache_bytes());
    return (wanted + mib - 1) / mib * mib;
}

bandwidth_result measure_read_bandwidth(cpu::thread_pool& pool, int64_t buffer_bytes) {
    read_bandwidth_probe probe(pool, buffer_bytes);
    return {probe.measure(5), probe.buffer_bytes()};
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace tandem::bench
