// cpu/thread_pool.h — A fixed set of worker threads that run index ranges in parallel.
//
// Owns: the CPU backend's worker threads. parallel_for splits [0, n) into contiguous pieces and
// runs them on the workers and the calling thread, returning when all are done. Batch
// invariance (design invariant 8) relies on one rule callers follow: the work for one index
// (one row, one head, one output column block) is computed entirely by one call and never
// depends on how the range was split, so the thread count never changes a result bit.
//
// One caller at a time: parallel_for is not reentrant and must not be called from inside fn or
// from two threads at once on the same pool (each model owns its pool).
//
// Why workers spin before they sleep: a batch-1 decode step of `small` is ~60 parallel passes
// of 50–300 µs each, separated by a few µs of serial work (norms, RoPE, routing). Waking a
// sleeping worker through a condition variable costs a futex call and a scheduler wake-up
// (10–50 µs, more on a loaded machine) per pass — a large part of a pass that short. So a worker
// that finished a pass polls for the next one for `k_spin_us` before it blocks (yielding the
// core after the first `k_pause_us`, so on an oversubscribed machine polling costs little), and
// claiming a piece is one atomic operation instead of a mutex round trip. A worker idle for
// longer (the server between steps) sleeps and costs nothing.
//
// Why pieces shrink toward the end of a pass (guided pieces): each piece takes 1 / (2 · threads)
// of what is left, so the first pieces are large (few claims) and the last ones a grain or two.
// With 4 equal pieces per thread, the thread that finished first waited for the other's last
// piece — ~5% of each thread's time in a `small` batch-16 step (~190 passes of ~100 µs, 8 pieces
// each). Measured in one process against equal pieces (`ab_decode`, both orders, Xeon 6 VM,
// two threads): batch 16 `amx` 5.0% faster, `exact` 2.3%; batch 1 `amx` 3.6%, `exact` 3.0%.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tandem::cpu {

// A non-owning reference to a callable fn(begin, end): two pointers, never a heap allocation.
// parallel_for runs for every linear layer, norm and attention loop of every step, and a
// std::function holding a lambda that captures more than two references allocates each time.
// The callable must outlive the call it is passed to (a temporary lambda argument does).
class range_fn {
public:
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, range_fn>)
    range_fn(F&& f)  // NOLINT(google-explicit-constructor): lambdas convert implicitly
        : obj_(const_cast<void*>(static_cast<const void*>(&f))),
          call_([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
    void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

private:
    void* obj_;
    void (*call_)(void*, int64_t, int64_t);
};

class thread_pool {
public:
    // threads = 0 uses std::thread::hardware_concurrency(); 1 runs everything inline.
    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Runs fn(begin, end) over pieces covering [0, n). A range of more than 2 · size() grains is
    // split into guided pieces: each takes 1 / (2 · size()) of what is left, at least `grain`
    // indices, so the last ones hold less than two grains; a shorter range into one piece per
    // grain, evenly (each at least grain / 2; one piece if n ≤ grain).
    void parallel_for(int64_t n, int64_t grain, range_fn fn);

private:
    // How long a worker polls for the next pass before it blocks (see the file comment).
    static constexpr int64_t k_spin_us = 200;
    static constexpr int64_t k_pause_us = 20;  // of which the first µs poll with pause, the rest with yield

    void worker_loop();
    // Claims and runs pieces of pass `gen` until none is left; false once the pass moved on.
    void run_pieces(uint32_t gen);
    bool wait_for_pass(uint32_t seen);

    std::vector<std::thread> workers_;
    // The current pass. Written by the caller before it publishes the pass in claim_, read by a
    // worker only after it claimed a piece of that pass (so the caller cannot rewrite them until
    // that piece is counted in done_).
    const range_fn* job_ = nullptr;
    std::vector<int64_t> bounds_;  // piece p of the current pass is [bounds_[p], bounds_[p + 1])
    // High 32 bits: the pass's generation; low 32: the next unclaimed piece. One word, so a
    // worker late from an earlier pass can never claim a piece of the next one.
    std::atomic<uint64_t> claim_{0};
    std::atomic<int64_t> done_{0};      // pieces of the current pass finished
    std::atomic<int> sleepers_{0};      // workers blocked (or about to block) on wake_cv_
    std::atomic<bool> stop_{false};
    std::mutex sleep_mutex_;
    std::condition_variable wake_cv_;
};

}  // namespace tandem::cpu
