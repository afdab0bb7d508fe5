// engine/prefix_cache.h — The prefix cache as the scheduler uses it: a cache/prefix_tree over the
// engine's page pool, plus the per-sequence bookkeeping that decides WHEN to snapshot.
//
// The scheduler calls, all on its thread:
//   attach    at admission, on a fresh sequence: the longest cached prefix (whole pages, at least
//             one token left to compute, ending at a snapshot) is put in the sequence — shared
//             history pages by reference, the snapshot restored into its slot — and the path is
//             locked. Returns the tokens the sequence now holds (its `computed`).
//   next_stop while prefilling: where the next chunk must end so a snapshot boundary falls on a
//             chunk end (chunk-invariant kernels make this free: the logits are the same).
//   after_step once the sequence holds `computed` tokens (before the step's token is sampled):
//               prefilling at an admitted boundary (the prompt-end boundary floor((T−1)/P)·P, a
//               multiple of cache.snapshot_interval_tokens, or the branch point: the end of the
//               history the tree already holds for these tokens, where a sibling would branch
//               off, when no snapshot is there yet) → snapshot + its pages into the tree;
//               past the tokens known at admission, at a page boundary → the private rolling decode-tail snapshot.
//   release   before the sequence is dropped (finish, abort, error, preemption): publishes the
//             decode-tail snapshot with its pages (turn N+1 of a session resumes after turn N's
//             output; a preempted request resumes where it was), then unlocks its path.
// The pool's capacity evicts through evict_pages() when it runs out of free pages.
//
// With the host tier (cache.host_memory_bytes > 0) every adopted page is written through to host
// memory, a device eviction keeps the host copy, and attach LOADS instead of copying: host-only
// pages get fresh pool pages, and the copy thread fills them and restores the snapshot layer by
// layer under one load_ticket; the sequence's forward pass reaches layer l only through that
// ticket's gate (cache/layer_gate.h). The tickets a sequence waits on are published in
// pool_sequences, where the executor finds them.
//
// Exactness: a resumed sequence holds bitwise the state a cold one would (snapshot.h), and the
// model's kernels are chunk- and batch-invariant, so cache on gives the tokens and logprobs of
// cache off (the unit and e2e A/B tests check exactly that).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "cache/host_tier.h"
#include "cache/prefix_tree.h"
#include "core/histogram.h"
#include "core/status.h"
#include "engine/pool_capacity.h"
#include "engine/request.h"

namespace tandem::engine {

struct prefix_cache_options {
    uint64_t cache_key = 0;                 // layout + model fingerprint + numerics (cache_key_of)
    int64_t snapshot_interval_tokens = 0;   // 0: only prompt-end and decode-tail snapshots
    int64_t snapshot_budget_bytes = 0;      // > 0: snapshot bytes kept at most
};



// The key every node and snapshot of one engine carries.
uint64_t prefix_cache_key(uint64_t layout_fingerprint, uint64_t model_fingerprint,
                          std::string_view numerics);

struct prefix_cache_stats {
    int64_t lookups = 0;            // admissions that asked the cache
    int64_t lookup_tokens = 0;      // tokens those admissions needed
    int64_t hit_tokens = 0;         // tokens they got from the cache instead of computing
    int64_t cached_pages = 0;       // pages the tree holds
    int64_t snapshots = 0;
    int64_t snapshot_bytes = 0;
    int64_t evicted_pages = 0;
    int64_t evicted_snapshots = 0;
    int64_t restore_failures = 0;   // snapshots that failed verification (dropped, recomputed)
    // Host tier (all 0 when off).
    bool host_enabled = false;
    int64_t host_bytes_total = 0;
    int64_t host_bytes_used = 0;
    int64_t host_loaded_pages = 0;  // pages loaded back from host (host hits)
    int64_t evicted_to_host = 0;    // device copies dropped while the host copy stayed
    int64_t host_evictions = 0;     // host copies dropped
    histogram_snapshot host_load_seconds;  // queue → last layer landed, per load
};

class prefix_cache {
public:
    // `host`: the host tier over seqs' pool (null: off).
    prefix_cache(std::shared_ptr<pool_sequences> seqs, prefix_cache_options opt,
                 std::unique_ptr<cache::host_tier> host = nullptr);
    ~prefix_cache();

    int64_t attach(const request& r);
    int64_t next_stop(const request& r) const;
    void after_step(const request& r);
    void release(const request& r, bool publish);
    // Did the last attach of this sequence load pages from the host tier? (shadow-check path)
    bool loaded_from_host(const request& r) const;

    int64_t evictable_pages() const;
    int64_t evict_pages(int64_t want);
    // Drops everything the cache holds; refused (unavailable) while any sequence holds a path.
    result<int64_t> flush();

    int64_t cached_pages() const { return tree_->stats().pages_held; }
    int64_t locked_nodes() const { return tree_->locked_nodes(); }
    bool holds_sequences() const { return !seqs_state_.empty(); }
    prefix_cache_stats stats() const;  // any thread (relaxed: a scrape may mix two steps)
    const cache::prefix_tree& tree() const { return *tree_; }
    cache::host_tier* host() { return host_.get(); }  // null when off (tests set hooks through it)

private:
    struct sequence_state {
        cache::prefix_tree::node* locked = nullptr;  // deepest node this sequence holds
        int64_t known_at_admission = 0;              // T: the prompt-end boundary is (T−1)/P·P
        int64_t branch_point = 0;  // where this request leaves the tree's history (0: nowhere)
        std::optional<cache::boundary_snapshot> tail;
        std::shared_ptr<cache::load_ticket> load;  // this sequence's own load (host tier)
        bool from_host = false;
    };
    bool attach_loaded(const request& r, sequence_state& s, cache::prefix_tree::match_result& m);
    bool is_boundary(const sequence_state& s, int64_t computed) const;
    void relock(sequence_state& s, cache::prefix_tree::node* n);
    void publish_stats();

    std::shared_ptr<pool_sequences> seqs_;
    prefix_cache_options opt_;
    std::unique_ptr<cache::host_tier> host_;  // declared before tree_: destroyed after it
    std::unique_ptr<cache::prefix_tree> tree_;
    std::unordered_map<sequence_id, sequence_state> seqs_state_;
    std::vector<int32_t> scratch_tokens_;
    int64_t lookups_ = 0, lookup_tokens_ = 0, hit_tokens_ = 0, restore_failures_ = 0;
    struct published {
        std::atomic<int64_t> lookups{0}, lookup_tokens{0}, hit_tokens{0}, cached_pages{0},
            snapshots{0}, snapshot_bytes{0}, evicted_pages{0}, evicted_snapshots{0},
            restore_failures{0}, evicted_to_host{0}, host_evictions{0};
    };
    published pub_;
};

}  // namespace tandem::engine
