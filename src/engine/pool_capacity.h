// engine/pool_capacity.h — Capacity answered by the cache helper's page pool.
//
// pool_sequences maps engine sequence ids to the pool's sequence slots; the model executor
// creates and drops them (a slot holds the sequence's window and compressor rings and its page
// table), pool_capacity grows their page tables before each step. Both run on the scheduler
// thread only. pool_capacity::free() is a no-op: dropping the slot (executor free_sequence)
// releases its pages; the scheduler always calls both. With a prefix cache, pages the cache holds
// count as available: admission counts what it could evict, and allocation evicts (history
// family, leaf-first) when the free list is short.
#pragma once

#include <memory>
#include <unordered_map>

#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "core/status.h"
#include "engine/capacity.h"
#include "engine/step_plan.h"

namespace tandem::engine {

class pool_sequences {
  public:
    explicit pool_sequences(std::unique_ptr<cache::page_pool> pool);

    cache::page_pool& pool() { return *pool_; }
    const cache::page_pool& pool() const { return *pool_; }
    // A fresh slot with reset state (window zeroed, compressor rings empty); unavailable when
    // every slot is taken.
    result<sequence_id> create();
    void destroy(sequence_id id);
    // The slot leaves this table WITHOUT being freed: the caller now owns it (pd: an aborted
    // transfer's slot and pages go to quarantine until the prefill side acknowledges).
    cache::slot_ref detach(sequence_id id);
    cache::slot_ref slot(sequence_id id) const;  // CHECKs the id is live
    int64_t live() const { return static_cast<int64_t>(slots_.size()); }

    // Loads a sequence's state depends on (host tier, cache/layer_gate.h): the executor's forward
    // pass reaches a layer only once every ticket of the batch's sequences landed that layer.
    void set_loads(sequence_id id, std::vector<std::shared_ptr<const cache::load_ticket>> tickets);
    const std::vector<std::shared_ptr<const cache::load_ticket>>* loads(sequence_id id) const;
    // Whether a sequence other than `owner` waits on `ticket` (it matched pages that load fills).
    bool waited_on_by_others(sequence_id owner, const cache::load_ticket* ticket) const;
    // How long a step waits for one layer of a load (cache.host_load_timeout_ms).
    int64_t load_timeout_ms = 30000;

  private:
    std::unique_ptr<cache::page_pool> pool_;
    std::unordered_map<sequence_id, cache::slot_ref> slots_;
    std::unordered_map<sequence_id, std::vector<std::shared_ptr<const cache::load_ticket>>> loads_;
    sequence_id next_id_ = 1;
};

class prefix_cache;

class pool_capacity final : public capacity {
  public:
    explicit pool_capacity(std::shared_ptr<pool_sequences> seqs,
                           std::shared_ptr<prefix_cache> prefix = nullptr);

    int64_t max_tokens_per_request() const override;
    bool can_admit(int64_t tokens, int64_t headroom_tokens) const override;
    bool allocate(sequence_id id, int64_t tokens) override;
    void free(sequence_id) override {}
    capacity_stats stats() const override;

  private:
    int64_t pages_for(int64_t tokens) const;
    std::shared_ptr<pool_sequences> seqs_;
    std::shared_ptr<prefix_cache> prefix_;
};

}  // namespace tandem::engine
