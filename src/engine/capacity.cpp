#include "engine/capacity.h"

#include "core/check.h"

namespace tandem::engine {

paged_capacity::paged_capacity(int64_t page_size, int64_t num_pages)
    : page_size_(page_size), num_pages_(num_pages), free_pages_(num_pages) {
    TANDEM_CHECK(page_size > 0 && num_pages > 0);
}

bool paged_capacity::can_admit(int64_t tokens, int64_t headroom_tokens) const {
    return pages_for(tokens) + pages_for(headroom_tokens) <= free_pages_;
}

bool paged_capacity::allocate(sequence_id id, int64_t tokens) {
    auto it = held_.find(id);
    int64_t have = it == held_.end() ? 0 : it->second;
    int64_t need = pages_for(tokens) - have;
    if (need <= 0) return true;
    if (need > free_pages_) return false;
    free_pages_ -= need;
    held_[id] = have + need;
    return true;
}

void paged_capacity::free(sequence_id id) {
    auto it = held_.find(id);
    if (it == held_.end()) return;
    free_pages_ += it->second;
    held_.erase(it);
}

capacity_stats paged_capacity::stats() const {
    return {num_pages_, free_pages_, page_size_, static_cast<int64_t>(held_.size())};
}

int64_t paged_capacity::pages_held(sequence_id id) const {
    auto it = held_.find(id);
    return it == held_.end() ? 0 : it->second;
}

void paged_capacity::check_integrity() const {
    int64_t held = 0;
    for (const auto& [id, pages] : held_) {
        TANDEM_CHECK(pages > 0);
        held += pages;
    }
    TANDEM_CHECK(held + free_pages_ == num_pages_);
    TANDEM_CHECK(free_pages_ >= 0);
}

}  // namespace tandem::engine
