#include "api/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tandem::api {

stop_matcher::stop_matcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

stop_matcher::step stop_matcher::push(std::string_view text) {
    step out;
    if (stopped_) return out;
    pending_ += text;
    // The earliest complete stop string wins.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = pending_.find(s);
        if (at < first) first = at, matched_ = s;
    }
    if (first != std::string::npos) {
        out.emit = pending_.substr(0, first);
        out.stopped = stopped_ = true;
        pending_.clear();
        return out;
    }
    // Hold back the longest suffix that could still grow into a stop string.
    size_t hold = 0;
    for (const std::string& s : stops_) {
        size_t max_k = std::min(s.size() - 1, pending_.size());
        for (size_t k = max_k; k > hold; --k) {
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    out.emit = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string stop_matcher::flush() {
    if (stopped_) return {};
    return std::exchange(pending_, {});
}

}  // namespace tandem::api
