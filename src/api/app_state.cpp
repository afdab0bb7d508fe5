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

}  // namespace tandem::api
