#include "api/abort_tombstones.h"

#include <algorithm>

namespace tandem::api {

abort_tombstones::abort_tombstones(size_t capacity, clock::duration lifetime)
    : capacity_(capacity), lifetime_(lifetime) {}

void abort_tombstones::expire(clock::time_point now) {
    while (!by_age_.empty() && now - by_age_.front().first >= lifetime_) {
        recorded_at_.erase(by_age_.front().second);
        by_age_.pop_front();
    }
}

void abort_tombstones::record(const std::string& http_id, clock::time_point now) {
    expire(now);
    if (capacity_ == 0) return;
    if (recorded_at_.contains(http_id)) {
        // Linear, but only for an id aborted twice while pending; the set is at most capacity_.
        auto it = std::find_if(by_age_.begin(), by_age_.end(),
                               [&](const auto& e) { return e.second == http_id; });
        by_age_.erase(it);
    } else if (by_age_.size() == capacity_) {
        recorded_at_.erase(by_age_.front().second);
        by_age_.pop_front();
    }
    by_age_.emplace_back(now, http_id);
    recorded_at_[http_id] = now;
}

bool abort_tombstones::contains(const std::string& http_id, clock::time_point now) {
    expire(now);
    return recorded_at_.contains(http_id);
}

size_t abort_tombstones::size(clock::time_point now) {
    expire(now);
    return by_age_.size();
}

}  // namespace tandem::api
