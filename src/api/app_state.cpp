#include "api/app_state.h"

namespace tandem::api {

void app_state::set_state(serving_state s, std::string detail) {
    std::lock_guard lock(detail_mu_);
    detail_ = std::move(detail);
    state_.store(s);
}

std::string app_state::state_detail() const {
    std::lock_guard lock(detail_mu_);
    return detail_;
}

bool app_state::track(const std::string& http_id, engine::request_id id) {
    std::lock_guard lock(tracked_mu_);
    tracked_[http_id].push_back(id);
    return tombstones_.contains(http_id, abort_tombstones::clock::now());
}

app_state::abort_plan app_state::plan_abort(const std::string& http_id) {
    std::lock_guard lock(tracked_mu_);
    abort_plan plan;
    if (auto it = tracked_.find(http_id); it != tracked_.end()) {
        plan.running = it->second;
    } else {
        tombstones_.record(http_id, abort_tombstones::clock::now());
        plan.pending = true;
    }
    return plan;
}

void app_state::untrack(const std::string& http_id, engine::request_id id) {
    std::lock_guard lock(tracked_mu_);
    auto it = tracked_.find(http_id);
    if (it == tracked_.end()) return;
    std::erase(it->second, id);
    if (it->second.empty()) tracked_.erase(it);
}

std::vector<engine::request_id> app_state::tracked_all() const {
    std::lock_guard lock(tracked_mu_);
    std::vector<engine::request_id> all;
    for (const auto& [rid, ids] : tracked_) all.insert(all.end(), ids.begin(), ids.end());
    return all;
}

}  // namespace tandem::api
