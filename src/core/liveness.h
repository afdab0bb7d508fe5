// core/liveness.h — Is every loop alive? (invariant 10: health tells the truth)
//
// Each long-running loop (HTTP, scheduler, transport) owns a heartbeat: it calls beat() whenever
// it makes progress and set_pending() when work is waiting for it. A loop is stalled when it has
// pending work and has not made progress for longer than the stall timeout; an idle loop is never
// stalled. A loop that exits while the process still runs calls mark_dead(). The /health handler
// asks the registry; it needs no cooperation from a wedged loop to notice it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

int64_t monotonic_ms();

class heartbeat {
public:
    explicit heartbeat(std::string name);
    void beat();
    void set_pending(bool has_work);
    void mark_dead(std::string why);
    const std::string& name() const { return name_; }

    // Why the loop is unhealthy at `now_ms`, or nothing when it is fine.
    std::optional<std::string> problem(int64_t now_ms, int64_t stall_timeout_ms) const;

private:
    std::string name_;
    std::atomic<int64_t> last_progress_ms_;
    std::atomic<bool> pending_{false};
    std::atomic<bool> dead_{false};
    mutable std::mutex why_mu_;
    std::string why_dead_;
};

class liveness_registry {
public:
    std::shared_ptr<heartbeat> add(std::string name);
    // The first problem found, naming the loop, or nothing when every loop is fine.
    std::optional<std::string> problem(int64_t stall_timeout_ms) const;

private:
    mutable std::mutex mu_;
    std::vector<std::shared_ptr<heartbeat>> loops_;
};

}  // namespace tandem
