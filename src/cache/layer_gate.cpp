// cache/layer_gate.cpp — the per-layer ready signal and the only constructor of layer_view.
#include "cache/layer_gate.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "core/liveness.h"

namespace tandem::cache {

load_ticket::load_ticket(int32_t num_layers, bool skip_gate)
    : num_layers_(num_layers), skip_gate_(skip_gate) {}

bool load_ticket::begin_layer(int32_t layer) {
    std::lock_guard lock(mu_);
    TANDEM_CHECK_MSG(layer == landed_ && !copying_, "a load ticket's layers land in order");
    if (cancelled_) return false;
    copying_ = true;
    return true;
}

void load_ticket::end_layer(int32_t layer) {
    {
        std::lock_guard lock(mu_);
        TANDEM_CHECK(layer == landed_ && copying_);
        copying_ = false;
        landed_ = layer + 1;
    }
    cv_.notify_all();
}

bool load_ticket::pause(int64_t ms) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return cancelled_; });
    return !cancelled_;
}

void load_ticket::abandon_layer() {
    {
        std::lock_guard lock(mu_);
        copying_ = false;
    }
    cv_.notify_all();
}

void load_ticket::fail(std::string why) {
    {
        std::lock_guard lock(mu_);
        copying_ = false;
        if (failed_.empty()) failed_ = std::move(why);
    }
    cv_.notify_all();
}

status load_ticket::wait_layer(int32_t layer, int64_t deadline_ms) const {
    std::unique_lock lock(mu_);
    for (;;) {
        if (landed_ > layer) return status::ok();
        if (!failed_.empty()) {
            return make_error(error_code::unavailable,
                              fmt::format("host-tier load of layer {} failed: {}", layer, failed_));
        }
        const int64_t left = deadline_ms - monotonic_ms();
        if (left <= 0) {
            return make_error(error_code::deadline_exceeded,
                              fmt::format("host-tier load of layer {} did not land in time "
                                          "(cache.host_load_timeout_ms; copy thread stalled?)",
                                          layer));
        }
        cv_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(left, 100)));
    }
}

void load_ticket::cancel() {
    std::unique_lock lock(mu_);
    cancelled_ = true;
    cv_.notify_all();  // wakes a test delay
    cv_.wait(lock, [&] { return !copying_; });
    // Anyone else waiting on this load (a request that matched a page it was loading) fails fast
    // instead of reading what never landed.
    if (landed_ < num_layers_ && failed_.empty()) failed_ = "the load was cancelled";
    cv_.notify_all();
}

bool load_ticket::complete() const {
    std::lock_guard lock(mu_);
    return landed_ == num_layers_;
}

layer_gate::layer_gate(page_pool& pool, std::vector<std::shared_ptr<const load_ticket>> tickets,
                       int64_t timeout_ms)
    : pool_(pool), tickets_(std::move(tickets)), timeout_ms_(timeout_ms) {}

namespace {

// Read through the pool: on a device arena the destination is not host memory.
bool still_sentinel(const page_pool& pool, const load_destination& d) {
    const int64_t n = std::min<int64_t>(d.size, 32);
    std::byte head[32];
    if (n <= 0 || !pool.read_bytes(head, d.bytes, n).is_ok()) return false;
    for (int64_t i = 0; i < n; ++i)
        if (head[i] != k_load_sentinel) return false;
    return true;
}

}  // namespace

bool layer_gate::still_owned(const load_destination& d) const {
    if (d.page.valid()) {
        const page_state st = pool_.state_of(d.page.page);
        return pool_.epoch_of(d.page.page) == d.page.epoch && st != page_state::free;
    }
    return pool_.is_current(d.slot);
}

result<layer_view> layer_gate::wait(int32_t layer) const {
    TANDEM_CHECK(layer >= 0 && layer < pool_.layout().num_layers());
    const int64_t deadline = monotonic_ms() + timeout_ms_;
    for (const auto& t : tickets_) {
        if (t->skip_gate()) continue;  // test-only: proves the sentinel check below fires
        TANDEM_RETURN_IF_ERROR(t->wait_layer(layer, deadline));
    }
    std::vector<std::string> unlanded;  // every kind of this layer still holding the sentinel
    for (const auto& t : tickets_) {
        for (const load_destination& d : t->destinations()) {
            if (d.layer == layer && still_owned(d) && still_sentinel(pool_, d) &&
                std::find(unlanded.begin(), unlanded.end(), d.kind) == unlanded.end()) {
                unlanded.push_back(d.kind);
            }
        }
    }
    if (!unlanded.empty()) {
        return make_error(error_code::internal,
                          fmt::format("host-tier sentinel: layer {} {} read before the load landed",
                                      layer, fmt::join(unlanded, ", ")));
    }
    return layer_view(&pool_, layer);
}

}  // namespace tandem::cache
