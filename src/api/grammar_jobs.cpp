#include "api/grammar_jobs.h"

namespace tandem::api {

void grammar_jobs::post(job j) {
    {
        std::lock_guard lock(mu_);
        if (!stopping_) {
            if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
            queue_.push_back(std::move(j));
            cv_.notify_one();
            return;
        }
    }
    j(false);
}

void grammar_jobs::stop() {
    std::deque<job> dropped;
    std::thread worker;
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
        dropped.swap(queue_);
        worker = std::move(worker_);
        cv_.notify_all();
    }
    if (worker.joinable()) worker.join();
    for (job& j : dropped) j(false);
}

void grammar_jobs::loop() {
    for (;;) {
        job j;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) return;
            j = std::move(queue_.front());
            queue_.pop_front();
        }
        j(true);
    }
}

}  // namespace tandem::api
