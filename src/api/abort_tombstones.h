// api/abort_tombstones.h — Aborts that arrived before their request: a bounded, expiring set of
// X-Request-Ids.
//
// /abort_request names a request by its X-Request-Id. A client (or an operator's script) may send
// the abort while the request itself is still on its way in — before the server tracks it — and
// an abort that found nothing used to be lost. Such an abort leaves a tombstone here; a request
// that arrives carrying a tombstoned id is aborted as soon as it is submitted, so it comes back
// with finish_reason "abort" exactly as if the abort had come a moment later.
//
// Bounds, because the ids come from clients: at most `capacity` ids (recording one more drops the
// oldest) and each lives `lifetime` (a pending abort only has to cover the race with its own
// request's admission, a matter of milliseconds to seconds). A tombstone is not consumed by the
// first request it stops — every engine request of that HTTP request (n > 1) must see it — so a
// client reusing an X-Request-Id within `lifetime` of aborting it gets the new request aborted.
//
// Not thread-safe: app_state guards it with the same mutex as its request tracking, which is what
// makes "tracked, or tombstoned" one atomic decision.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <unordered_map>

namespace tandem::api {

class abort_tombstones {
  public:
    using clock = std::chrono::steady_clock;

    static constexpr size_t default_capacity = 4096;
    static constexpr std::chrono::seconds default_lifetime{10};

    explicit abort_tombstones(size_t capacity = default_capacity,
                              clock::duration lifetime = default_lifetime);

    // Records a pending abort for `http_id` (again: its lifetime restarts).
    void record(const std::string& http_id, clock::time_point now);
    // Whether a pending abort names `http_id` at `now`.
    bool contains(const std::string& http_id, clock::time_point now);
    // Live tombstones at `now`.
    size_t size(clock::time_point now);

  private:
    void expire(clock::time_point now);

    size_t capacity_;
    clock::duration lifetime_;
    std::deque<std::pair<clock::time_point, std::string>> by_age_;  // oldest first
    std::unordered_map<std::string, clock::time_point> recorded_at_;
};

}  // namespace tandem::api
