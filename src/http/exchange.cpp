#include "http/exchange.h"

namespace tandem::http {

bool mailbox::post(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    if (closed_ || !async_) return false;
    queue_.push_back(std::move(fn));
    uv_async_send(async_);
    return true;
}

void mailbox::drain() {
    std::vector<std::function<void()>> batch;
    {
        std::lock_guard lock(mu_);
        batch.swap(queue_);
    }
    for (auto& fn : batch) fn();
}

void mailbox::close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    queue_.clear();
}

}  // namespace tandem::http
