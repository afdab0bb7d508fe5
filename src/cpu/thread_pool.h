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
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::cpu {

class thread_pool {
public:
    // threads = 0 uses std::thread::hardware_concurrency(); 1 runs everything inline.
    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Runs fn(begin, end) over pieces covering [0, n); pieces hold at least `grain` indices.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t job_pieces_ = 0;
    int64_t next_piece_ = 0;
    int64_t pieces_done_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

}  // namespace tandem::cpu
