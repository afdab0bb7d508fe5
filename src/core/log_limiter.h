// core/log_limiter.h — At most one log line per interval for an event a peer or client can
// repeat at will.
//
// Dropped input is counted in /metrics and logged, but a misbehaving peer must not be able to
// flood the log (and the disk) by repeating it: the first line logs at once, later ones at most
// every `interval_ms`, each saying how many were held back since the previous line.
// Thread-safe (a mutex: these events are rare by nature, never on a hot path).
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>

namespace tandem {

class log_limiter {
  public:
    explicit log_limiter(int64_t interval_ms) : interval_ms_(interval_ms) {}

    // Whether to log the event happening at `now_ms`; when true, `*held_back` receives how many
    // events were not logged since the last line that was.
    bool allow(int64_t now_ms, int64_t* held_back) {
        std::lock_guard lock(mu_);
        if (now_ms < next_ms_) {
            ++held_;
            return false;
        }
        *held_back = held_;
        held_ = 0;
        next_ms_ = now_ms + interval_ms_;
        return true;
    }

  private:
    std::mutex mu_;
    int64_t interval_ms_;
    int64_t next_ms_ = std::numeric_limits<int64_t>::min();
    int64_t held_ = 0;
};

}  // namespace tandem
