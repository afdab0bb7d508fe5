#include "core/liveness.h"

#include <fmt/format.h>

#include <chrono>

namespace tandem {

int64_t monotonic_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

heartbeat::heartbeat(std::string name) : name_(std::move(name)), last_progress_ms_(monotonic_ms()) {}

void heartbeat::beat() { last_progress_ms_.store(monotonic_ms()); }

void heartbeat::set_pending(bool has_work) {
    // Work arriving at an idle loop starts its stall clock now, not at its last progress.
    if (has_work && !pending_.load()) beat();
    pending_.store(has_work);
}

void heartbeat::mark_dead(std::string why) {
    {
        std::lock_guard lock(why_mu_);
        why_dead_ = std::move(why);
    }
    dead_.store(true);
}

std::optional<std::string> heartbeat::problem(int64_t now_ms, int64_t stall_timeout_ms) const {
    if (dead_.load()) {
        std::lock_guard lock(why_mu_);
        return fmt::format("{} loop stopped: {}", name_, why_dead_);
    }
    if (!pending_.load()) return std::nullopt;
    int64_t silent = now_ms - last_progress_ms_.load();
    if (silent > stall_timeout_ms) {
        return fmt::format("{} loop has pending work and made no progress for {} ms", name_, silent);
    }
    return std::nullopt;
}

std::shared_ptr<heartbeat> liveness_registry::add(std::string name) {
    auto hb = std::make_shared<heartbeat>(std::move(name));
    std::lock_guard lock(mu_);
    loops_.push_back(hb);
    return hb;
}

std::optional<std::string> liveness_registry::problem(int64_t stall_timeout_ms) const {
    std::lock_guard lock(mu_);
    int64_t now = monotonic_ms();
    for (const auto& hb : loops_) {
        if (auto p = hb->problem(now, stall_timeout_ms)) return p;
    }
    return std::nullopt;
}

}  // namespace tandem
