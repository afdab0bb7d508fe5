// engine/capacity.h — How many tokens of model state the cache can hold, per request.
//
// The scheduler asks capacity before it lets a request grow: can_admit() before admission,
// allocate() before each step extends a sequence, free() when a request ends or is preempted.
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

namespace tandem::engine {

struct capacity_stats {
    int64_t pages_total = 0;
    int64_t pages_free = 0;
    int64_t page_size = 0;     // tokens per page
    int64_t sequences = 0;     // requests holding capacity
};

class capacity {
public:
    virtual ~capacity() = default;
    // The most tokens one request can ever hold (the whole cache, if it were alone).
    virtual int64_t max_tokens_per_request() const = 0;
    // Could a request not yet holding anything get `tokens` now, with `headroom_tokens` left
    // over for the running requests' next steps?
    virtual bool can_admit(int64_t tokens, int64_t headroom_tokens) const = 0;
    // Grows request `id`'s holding to cover `tokens` tokens; false (nothing changed) when full.
    virtual bool allocate(uint64_t id, int64_t tokens) = 0;
    // Releases everything `id` holds; unknown ids are ignored.
    virtual void free(uint64_t id) = 0;
    virtual capacity_stats stats() const = 0;
};

class paged_capacity final : public capacity {
public:
    paged_capacity(int64_t page_size, int64_t num_pages);

    int64_t max_tokens_per_request() const override { return page_size_ * num_pages_; }
    bool can_admit(int64_t tokens, int64_t headroom_tokens) const override;
    bool allocate(uint64_t id, int64_t tokens) override;
    void free(uint64_t id) override;
    capacity_stats stats() const override;

    int64_t pages_held(uint64_t id) const;
    // Free + held pages add up to the total; no holding is empty.
    void check_integrity() const;

private:
    int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
    int64_t page_size_;
    int64_t num_pages_;
    int64_t free_pages_;
    std::unordered_map<uint64_t, int64_t> held_;  // id → pages
};

}  // namespace tandem::engine
