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

void app_state::track(const std::string& http_id, engine::request_id id) {
    std::lock_guard lock(tracked_mu_);
    tracked_[http_id].push_back(id);
}

void app_state::untrack(const std::string& http_id, engine::request_id id) {
    std::lock_guard lock(tracked_mu_);
    auto it = tracked_.find(http_id);
    if (it == tracked_.end()) return;
    std::erase(it->second, id);
    if (it->second.empty()) tracked_.erase(it);
}

std::vector<engine::request_id> app_state::tracked(const std::string& http_id) const {
    std::lock_guard lock(tracked_mu_);
    auto it = tracked_.find(http_id);
    return it == tracked_.end() ? std::vector<engine::request_id>{} : it->second;
}

std::vector<engine::request_id> app_state::tracked_all() const {
    std::lock_guard lock(tracked_mu_);
    std::vector<engine::request_id> all;
    for (const auto& [rid, ids] : tracked_) all.insert(all.end(), ids.begin(), ids.end());
    return all;
}

}  // namespace tandem::api
