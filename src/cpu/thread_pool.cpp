// cpu/thread_pool.cpp — see thread_pool.h.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tandem::cpu {

namespace {

// claim_ word: generation (32 bits) | pieces of the pass (16) | next unclaimed piece (16).
constexpr int64_t k_max_pieces = 0xffff;
// A pass's pieces at most, per thread: guided shares shrink to a grain long before (a cap that
// bit would leave its whole rest to one last piece).
constexpr int64_t k_pieces_per_thread = 64;
int64_t max_pieces(int64_t threads) { return std::min(k_pieces_per_thread * threads, k_max_pieces); }

uint32_t generation_of(uint64_t c) { return static_cast<uint32_t>(c >> 32); }
int64_t pieces_of(uint64_t c) { return static_cast<int64_t>((c >> 16) & 0xffff); }
int64_t next_of(uint64_t c) { return static_cast<int64_t>(c & 0xffff); }

// The pieces of [0, n) into bounds (see thread_pool.h); returns their number. A range of at most
// 2 · threads grains: one piece per grain, split evenly (as before guided pieces: a piece then
// holds at least grain / 2). A longer one, guided: each piece takes 1 / (2 · threads) of what is
// left, at least `grain`; a rest shorter than grain joins the piece before it, and piece number
// max_pieces(threads) takes all that is left (~e^-32 of n: never, in practice).
int64_t split_pieces(int64_t n, int64_t grain, int64_t threads, std::vector<int64_t>& bounds) {
    const int64_t share = 2 * threads, grains = (n + grain - 1) / grain;
    bounds.clear();
    bounds.push_back(0);
    if (grains <= share) {
        for (int64_t p = 1; p <= grains; ++p) bounds.push_back(n * p / grains);
        return grains;
    }
    for (int64_t at = 0; at < n;) {
        int64_t size = std::max(grain, (n - at + share - 1) / share);
        if (n - at - size < grain || static_cast<int64_t>(bounds.size()) == max_pieces(threads)) size = n - at;
        at += size;
        bounds.push_back(at);
    }
    return static_cast<int64_t>(bounds.size()) - 1;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

thread_pool::thread_pool(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    bounds_.reserve(static_cast<size_t>(max_pieces(threads) + 1));  // no allocation in a pass
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
    stop_.store(true);
    {
        std::lock_guard<std::mutex> lock(sleep_mutex_);
    }
    wake_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::parallel_for(int64_t n, int64_t grain, range_fn fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    if (n <= grain || workers_.empty()) {
        fn(0, n);
        return;
    }
    const int64_t pieces = split_pieces(n, grain, size(), bounds_);  // n > grain: at least two
    const uint32_t gen = generation_of(claim_.load(std::memory_order_relaxed)) + 1;
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    // Publishing the pass and reading sleepers_ are both seq_cst, as are a sleeper's increment
    // and its re-check of claim_: either the caller sees the sleeper and wakes it, or the
    // sleeper sees the new pass before it blocks.
    claim_.store((uint64_t{gen} << 32) | (static_cast<uint64_t>(pieces) << 16));
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lock(sleep_mutex_); }
        wake_cv_.notify_all();
    }
    run_pieces(gen);
    // The other pieces are short; a worker descheduled in the middle of one (a shared machine)
    // gets this core after a while of polling.
    for (int64_t spins = 0; done_.load(std::memory_order_acquire) < pieces; ++spins) {
        if (spins < 4096) cpu_relax();
        else std::this_thread::yield();
    }
}

void thread_pool::run_pieces(uint32_t gen) {
    for (;;) {
        uint64_t c = claim_.load(std::memory_order_acquire);
        do {
            if (generation_of(c) != gen || next_of(c) >= pieces_of(c)) return;
        } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire));
        // The piece is ours and uncounted, so the caller keeps job_ and bounds_ as they are until
        // we count it.
        const int64_t p = next_of(c);
        const int64_t begin = bounds_[static_cast<size_t>(p)], end = bounds_[static_cast<size_t>(p) + 1];
        if (begin < end) (*job_)(begin, end);
        done_.fetch_add(1, std::memory_order_release);
    }
}

bool thread_pool::wait_for_pass(uint32_t seen) {
    using clock = std::chrono::steady_clock;
    auto moved = [&] { return stop_.load() || generation_of(claim_.load()) != seen; };
    // Poll with pause for the first few µs (the gap between two passes of one step), then
    // with sched_yield: on a machine with more runnable threads than cores (a shared dev box, a
    // test suite beside a build) a polling worker would burn the time slice the caller's thread
    // or another process needs, while yield hands it over at once and costs ~1 µs otherwise.
    const auto start = clock::now();
    const auto pause_until = start + std::chrono::microseconds(k_pause_us);
    const auto until = start + std::chrono::microseconds(k_spin_us);
    for (int64_t spins = 0;; ++spins) {
        if (moved()) return !stop_.load();
        if ((spins & 15) != 15) {
            cpu_relax();
            continue;
        }
        const auto now = clock::now();
        if (now > until) break;
        if (now > pause_until) std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleepers_.fetch_add(1);
    wake_cv_.wait(lock, moved);
    sleepers_.fetch_sub(1);
    return !stop_.load();
}

void thread_pool::worker_loop() {
    uint32_t seen = 0;
    while (wait_for_pass(seen)) {
        seen = generation_of(claim_.load(std::memory_order_acquire));
        run_pieces(seen);
    }
}

}  // namespace tandem::cpu
