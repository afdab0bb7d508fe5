// cpu/thread_pool.h — A fixed set of worker threads that run index ranges in parallel.
//
// Owns: the CPU backend's worker threads. parallel_for splits [0, n) into contiguous pieces and
// runs them on the workers and the calling thread, returning when all are done. Batch
// invariance (design invariant 8) relies on one rule callers follow: the work for one index
// (one row, one head, one output column block) is computed entirely by one call and never
// depends on how the range was split, so the thread count never changes a result bit.
#pragma once

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

    // Runs fn(begin, end) over pieces covering [0, n); pieces hold at least `grain` indices.
    void parallel_for(int64_t n, int64_t grain, range_fn fn);

private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    const range_fn* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t job_pieces_ = 0;
    int64_t next_piece_ = 0;
    int64_t pieces_done_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

}  // namespace tandem::cpu
