// engine/capacity.h — How many tokens of model state the cache can hold, per request.
//
// The scheduler asks capacity before it lets a request grow: can_admit() before admission,
// allocate() before each step extends a sequence, free() when a request ends or is preempted
// (before the executor drops the sequence). Holdings are keyed by the executor's sequence_id,
// so a pool-backed capacity can grow the very slot the model writes.
// Capacity counts in tokens; an implementation rounds up to its own granularity (pages).
// allocate() is all-or-nothing: on false nothing changed, and the scheduler waits or preempts.
//
// paged_capacity is a plain page counter (tests, and engines whose model keeps its own state).
// A pool-backed implementation answers from the cache helper's page_pool, so /metrics reports
// the real pages.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "engine/step_plan.h"

namespace tandem::engine {

struct capacity_stats {
    int64_t pages_total = 0;
    int64_t pages_free = 0;
    int64_t page_size = 0;  // tokens per page
    int64_t sequences = 0;  // requests holding capacity
    int64_t cached_pages = 0;  // pages the prefix cache holds (freed by eviction when unused)
};

class capacity {
  public:
    virtual ~capacity() = default;
    // The most tokens one request can ever hold (the whole cache, if it were alone).
    virtual int64_t max_tokens_per_request() const = 0;
    // Could a request not yet holding anything get `tokens` now, with `headroom_tokens` left
    // over for the running requests' next steps?
    virtual bool can_admit(int64_t tokens, int64_t headroom_tokens) const = 0;
    // Grows sequence `id`'s holding to cover `tokens` tokens; false (nothing changed) when full.
    virtual bool allocate(sequence_id id, int64_t tokens) = 0;
    // Releases everything `id` holds; unknown ids are ignored.
    virtual void free(sequence_id id) = 0;
    virtual capacity_stats stats() const = 0;
};

class paged_capacity final : public capacity {
  public:
    paged_capacity(int64_t page_size, int64_t num_pages);

    int64_t max_tokens_per_request() const override { return page_size_ * num_pages_; }
    bool can_admit(int64_t tokens, int64_t headroom_tokens) const override;
    bool allocate(sequence_id id, int64_t tokens) override;
    void free(sequence_id id) override;
    capacity_stats stats() const override;

    int64_t pages_held(sequence_id id) const;
    // Free + held pages add up to the total; no holding is empty.
    void check_integrity() const;

  private:
    int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
    int64_t page_size_;
    int64_t num_pages_;
    int64_t free_pages_;
    std::unordered_map<sequence_id, int64_t> held_;  // sequence → pages
};

}  // namespace tandem::engine
