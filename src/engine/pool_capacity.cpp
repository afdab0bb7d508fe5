#include "engine/pool_capacity.h"

#include "core/check.h"
#include "engine/prefix_cache.h"

namespace tandem::engine {

pool_sequences::pool_sequences(std::unique_ptr<cache::page_pool> pool) : pool_(std::move(pool)) {}

result<sequence_id> pool_sequences::create() {
    const sequence_id id = next_id_++;
    cache::slot_ref s = pool_->alloc_sequence(static_cast<cache::owner_id>(id));
    if (!s.valid()) {
        return make_error(error_code::unavailable, "no free sequence slot in the cache pool");
    }
    pool_->reset_sequence_state(s);
    slots_.emplace(id, s);
    return id;
}

void pool_sequences::destroy(sequence_id id) {
    auto it = slots_.find(id);
    TANDEM_CHECK_MSG(it != slots_.end(), "destroy of an unknown sequence");
    pool_->free_sequence(it->second);
    slots_.erase(it);
    loads_.erase(id);
}

void pool_sequences::set_loads(sequence_id id,
                               std::vector<std::shared_ptr<const cache::load_ticket>> tickets) {
    if (tickets.empty()) loads_.erase(id);
    else loads_[id] = std::move(tickets);
}

const std::vector<std::shared_ptr<const cache::load_ticket>>* pool_sequences::loads(
    sequence_id id) const {
    auto it = loads_.find(id);
    return it == loads_.end() ? nullptr : &it->second;
}

bool pool_sequences::waited_on_by_others(sequence_id owner, const cache::load_ticket* ticket) const {
    for (const auto& [id, tickets] : loads_) {
        if (id == owner) continue;
        for (const auto& t : tickets)
            if (t.get() == ticket) return true;
    }
    return false;
}

cache::slot_ref pool_sequences::detach(sequence_id id) {
    auto it = slots_.find(id);
    TANDEM_CHECK_MSG(it != slots_.end(), "detach of an unknown sequence");
    cache::slot_ref s = it->second;
    slots_.erase(it);
    loads_.erase(id);
    return s;
}

cache::slot_ref pool_sequences::slot(sequence_id id) const {
    auto it = slots_.find(id);
    TANDEM_CHECK_MSG(it != slots_.end(), "unknown sequence");
    return it->second;
}

pool_capacity::pool_capacity(std::shared_ptr<pool_sequences> seqs,
                             std::shared_ptr<prefix_cache> prefix)
    : seqs_(std::move(seqs)), prefix_(std::move(prefix)) {}

int64_t pool_capacity::pages_for(int64_t tokens) const {
    const int64_t ps = seqs_->pool().layout().page_size();
    return (tokens + ps - 1) / ps;
}

int64_t pool_capacity::max_tokens_per_request() const {
    return seqs_->pool().stats().pages_total * seqs_->pool().layout().page_size();
}

bool pool_capacity::can_admit(int64_t tokens, int64_t headroom_tokens) const {
    const cache::pool_stats s = seqs_->pool().stats();
    const int64_t need = pages_for(tokens) + pages_for(headroom_tokens);
    if (s.slots_free == 0) return false;
    if (seqs_->pool().can_alloc_pages(need)) return true;
    return prefix_ && s.pages_free + prefix_->evictable_pages() >= need;
}

bool pool_capacity::allocate(sequence_id id, int64_t tokens) {
    const cache::slot_ref slot = seqs_->slot(id);
    if (seqs_->pool().ensure_capacity(slot, tokens)) return true;
    if (!prefix_) return false;
    const int64_t missing = pages_for(tokens) - static_cast<int64_t>(seqs_->pool().page_table(slot).size());
    prefix_->evict_pages(missing - seqs_->pool().stats().pages_free);
    return seqs_->pool().ensure_capacity(slot, tokens);
}

capacity_stats pool_capacity::stats() const {
    const cache::pool_stats s = seqs_->pool().stats();
    return {s.pages_total, s.pages_free, seqs_->pool().layout().page_size(), seqs_->live(),
            prefix_ ? prefix_->cached_pages() : 0};
}

}  // namespace tandem::engine
