// cpu/thread_pool.cpp — see thread_pool.h.
#include "cpu/thread_pool.h"

#include <algorithm>

namespace tandem::cpu {

thread_pool::thread_pool(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::parallel_for(int64_t n, int64_t grain, range_fn fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t pieces = std::min<int64_t>(size() * 4, (n + grain - 1) / grain);
    if (pieces <= 1 || workers_.empty()) {
        fn(0, n);
        return;
    }
    auto run_piece = [&](int64_t p) {
        int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
        if (begin < end) fn(begin, end);
    };
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_pieces_ = pieces;
    next_piece_ = 0;
    pieces_done_ = 0;
    ++generation_;
    work_cv_.notify_all();
    while (next_piece_ < job_pieces_) {
        int64_t p = next_piece_++;
        lock.unlock();
        run_piece(p);
        lock.lock();
        ++pieces_done_;
    }
    done_cv_.wait(lock, [&] { return pieces_done_ == job_pieces_; });
    job_ = nullptr;
}

void thread_pool::worker_loop(int) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        work_cv_.wait(lock, [&] { return stop_ || (job_ && generation_ != seen && next_piece_ < job_pieces_); });
        if (stop_) return;
        seen = generation_;
        while (job_ && next_piece_ < job_pieces_) {
            int64_t p = next_piece_++;
            const auto* fn = job_;
            int64_t n = job_n_, pieces = job_pieces_;
            lock.unlock();
            int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
            if (begin < end) (*fn)(begin, end);
            lock.lock();
            if (++pieces_done_ == job_pieces_) done_cv_.notify_all();
        }
    }
}

}  // namespace tandem::cpu
