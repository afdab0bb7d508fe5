// topo/pd_holds.cpp — Holding named source pages until the decode side has copied them.
#include "topo/pd_holds.h"

#include "core/liveness.h"
#include "core/log.h"

namespace tandem::topo {

span_holds::span_holds(std::shared_ptr<engine::pool_sequences> seqs, int64_t lease_ms,
                       std::function<int64_t()> clock_ms)
    : seqs_(std::move(seqs)), lease_ms_(lease_ms), clock_ms_(std::move(clock_ms)) {}

// Whatever is still held goes back to the pool (the scheduler that owned it is gone by now: the
// deployment destroys this after it).
span_holds::~span_holds() {
    while (!holds_.empty()) drop(holds_.begin());
}

int64_t span_holds::now_ms() const { return clock_ms_ ? clock_ms_() : monotonic_ms(); }

void span_holds::hold(transport::peer_id peer, uint64_t request, cache::page_ref page) {
    seqs_->pool().retain_page(page);
    held& h = holds_[{peer, request}];
    h.pages.push_back(page);
    h.lease_deadline_ms = now_ms() + lease_ms_;
    publish();
}

void span_holds::release(transport::peer_id peer, uint64_t request) {
    {
        std::lock_guard lock(mu_);
        pending_.push_back({peer, request, false});
        pending_n_.store(static_cast<int64_t>(pending_.size()));
        if (wake_) wake_();
    }
}

void span_holds::release_peer(transport::peer_id peer) {
    std::lock_guard lock(mu_);
    pending_.push_back({peer, 0, true});
    pending_n_.store(static_cast<int64_t>(pending_.size()));
    if (wake_) wake_();
}

void span_holds::set_wake(std::function<void()> wake) {
    std::lock_guard lock(mu_);  // held while calling: set_wake({}) then means "never again"
    wake_ = std::move(wake);
}

void span_holds::drop(std::map<key, held>::iterator it) {
    for (const cache::page_ref& p : it->second.pages) seqs_->pool().release_page(p);
    holds_.erase(it);
}

void span_holds::poll() {
    std::vector<pending> todo;
    {
        std::lock_guard lock(mu_);
        todo.swap(pending_);
        pending_n_.store(0);
    }
    for (const pending& p : todo) {
        if (!p.whole_peer) {
            if (auto it = holds_.find({p.peer, p.request}); it != holds_.end()) {
                drop(it);
                released_.fetch_add(1);
            }
            continue;
        }
        for (auto it = holds_.lower_bound({p.peer, 0}); it != holds_.end() && it->first.first == p.peer;) {
            auto next = std::next(it);
            drop(it);
            released_.fetch_add(1);
            it = next;
        }
    }
    const int64_t now = now_ms();
    for (auto it = holds_.begin(); it != holds_.end();) {
        auto next = std::next(it);
        if (it->second.lease_deadline_ms <= now) {
            TANDEM_LOG_WARN("pd: the decode side never released the named pages of request {} "
                            "(lease of {} ms ran out); {} page references dropped",
                            it->first.second, lease_ms_, it->second.pages.size());
            drop(it);
            expired_.fetch_add(1);
        }
        it = next;
    }
    publish();
}

void span_holds::publish() {
    int64_t pages = 0;
    for (const auto& [k, h] : holds_) pages += static_cast<int64_t>(h.pages.size());
    requests_held_.store(static_cast<int64_t>(holds_.size()));
    pages_held_.store(pages);
}

span_hold_stats span_holds::stats() const {
    return {requests_held_.load(), pages_held_.load(), released_.load(), expired_.load()};
}

}  // namespace tandem::topo
