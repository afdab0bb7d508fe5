// cache/prefix_tree.h — The radix prefix tree: history pages shared by reference between requests,
// and boundary snapshots attached at admitted boundaries (prefix-cache.md §5).
//
// Owns: one reference on every page it holds (page_pool refcounts), the snapshots, recency, locks
// and eviction of both families. It does not own sequences: callers copy a match's page refs into
// a slot's page table (retain + append) and restore its snapshot (snapshot.h).
//
// Shape: every edge is exactly one page of P tokens, so a node is "the first depth·P tokens" and
// splits and matches can only happen at page boundaries; a partly filled page is never inserted.
// The key of a child is its P token ids; the tree as a whole is keyed by the cache key (layout
// fingerprint + model fingerprint + numerics mode), which every snapshot header repeats.
//
// Rules (check_integrity() asserts them):
//   every node but the root holds its page in the device pool (one live, SEALED page: refcount
//     >= 1, matching epoch), in the host tier (a host page id), or both; no device or host page
//     is held by two nodes; node.depth = parent.depth + P
//   a snapshot sits only at its own boundary (header.boundary == node depth)
//   locks: lock(n) counts on every node of root..n, so node.locks >= Σ child.locks; a locked
//     node's page is never evicted (its sequence reads it). Snapshots are copied out synchronously
//     on restore, so they are not locked and may be evicted under their byte budget any time.
//   match never returns more than floor((len − 1) / P) · P tokens: at least one token is always
//     recomputed, so no logits are stored; and only a node with a snapshot can be resumed from.
//
// Host tier (host_tier.h, optional): every page the tree adopts is written through to a host page
// on the copy thread. A device page whose store has not landed is never evicted (the copy thread
// reads it); the caller drains the host tier before evicting (prefix_cache does).
//
// Eviction, two families, leaf-first:
//   history (evict_pages, when the pool runs out): unlocked "device leaves" (no descendant holds
//     a device page). With a landed host copy only the device copy is dropped — the node stays
//     and a later match loads it back (attach_loaded); without one the node's subtree goes.
//     Dangling nodes (no snapshot: nothing can resume there) go first, then by score. When the
//     host tier is full, host copies go the same way (unlocked, host-only leaves first).
//   snapshots (whenever their bytes exceed the budget): lowest score first.
//   score = last use (a tick per match/insert) + tokens saved per page-sized unit of memory held
//     (depth · page_bytes / bytes held ÷ P): recent and deep-but-small entries stay (Marconi).
//
// Threading: the engine's scheduler thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/host_tier.h"
#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "cache/snapshot.h"

namespace tandem::cache {

struct prefix_tree_options {
    int64_t snapshot_budget_bytes = 0;  // > 0: snapshots beyond this are evicted
};

struct prefix_tree_stats {
    int64_t nodes = 0;               // page-holding nodes
    int64_t pages_held = 0;          // pages the tree holds a reference on
    int64_t snapshots = 0;
    int64_t snapshot_bytes = 0;
    int64_t evicted_pages = 0;       // history family
    int64_t evicted_snapshots = 0;   // snapshot family (budget, history eviction, flush)
    int64_t host_pages_held = 0;     // host copies the tree holds (stored or being stored)
    int64_t evicted_to_host = 0;     // device copies dropped while the host copy stayed
    int64_t host_evictions = 0;      // host copies dropped (host tier full, flush)
    int64_t host_store_skipped = 0;  // pages not written through (host tier full of locked pages)
};

class prefix_tree {
public:
    struct node;

    struct match_result {
        int64_t tokens = 0;                    // resumable prefix length (a page multiple)
        node* at = nullptr;                    // the node at `tokens` (null when 0)
        std::vector<page_ref> pages;           // history pages [0, tokens / P); invalid: host only
        std::vector<int32_t> host_pages;       // the host copy of each page (-1: none)
        std::vector<node*> path;               // the node of each page
        // Loads (of other requests) still writing some of `pages`: the matcher waits on them too.
        std::vector<std::shared_ptr<const load_ticket>> loading;
        const boundary_snapshot* snapshot = nullptr;
        std::shared_ptr<const boundary_snapshot> snapshot_ref;  // keeps it alive for a load
    };

    prefix_tree(page_pool& pool, uint64_t cache_key, prefix_tree_options opt,
                host_tier* host = nullptr);
    ~prefix_tree();  // releases every page it holds; the pool must outlive the tree
    prefix_tree(const prefix_tree&) = delete;
    prefix_tree& operator=(const prefix_tree&) = delete;

    uint64_t cache_key() const { return cache_key_; }
    int64_t page_size() const { return page_size_; }

    // The deepest node with a snapshot along `tokens`, within floor((len − 1) / P) · P tokens.
    // Marks the path as used. Does not lock.
    match_result match(std::span<const int32_t> tokens);
    // Locks / unlocks the path root..n (n may be null: nothing).
    void lock(node* n);
    void unlock(node* n);

    // Adopts history for tokens[0, b) (b = tokens.size(), a page multiple): pages[i] holds page i.
    // Missing nodes take the caller's page (sealed here, one more reference); existing nodes keep
    // theirs. `snap` is attached at b unless that node already has one. Returns the node at b.
    node* insert(std::span<const int32_t> tokens, std::span<const page_ref> pages,
                 std::optional<boundary_snapshot> snap);
    // How many tokens of `tokens` (whole pages, within floor((len − 1) / P) · P) the tree holds
    // history for, snapshot or not: where a new branch would leave the tree. No side effects.
    int64_t history_depth(std::span<const int32_t> tokens) const;
    // Does the node at exactly tokens[0, b) exist (with a snapshot)? No side effects.
    bool contains(std::span<const int32_t> tokens) const { return find(tokens) != nullptr; }
    bool has_snapshot(std::span<const int32_t> tokens) const;

    // attach with the host tier: node n (host copy only) gets `device`, a page its loader
    // allocated and is filling under `ticket` (sealed here, one more reference).
    void adopt_loading_page(node* n, page_ref device, std::shared_ptr<const load_ticket> ticket);
    // A cancelled load: nodes that adopted a page from it drop that device copy (never landed).
    void drop_loading(const load_ticket* ticket);

    // Pages evict_pages could free now.
    int64_t evictable_pages() const;
    // Frees up to `want` pool pages by evicting history leaves; returns how many were freed.
    int64_t evict_pages(int64_t want);
    // Drops every unlocked node and every snapshot; returns the pages freed.
    int64_t flush();
    int64_t locked_nodes() const;

    prefix_tree_stats stats() const { return stats_; }
    void check_integrity() const;

private:
    node* child_of(const node* n, std::span<const int32_t> key) const;
    const node* find(std::span<const int32_t> tokens) const;
    void touch(node* n);
    double score(const node& n, bool snapshot_only) const;
    void drop_snapshot(node& n);
    void enforce_snapshot_budget();
    void remove_leaf(node* n);
    void remove_subtree(node* n);
    void drop_device_copy(node& n);
    void drop_host_copy(node& n);
    void write_through(node& n);
    int32_t alloc_host_page();
    bool usable(const node& n) const;
    host_tier* host_;

    page_pool& pool_;
    uint64_t cache_key_;
    prefix_tree_options opt_;
    int64_t page_size_;
    std::unique_ptr<node> root_;
    uint64_t tick_ = 0;
    prefix_tree_stats stats_;
};

struct prefix_tree::node {
    node* parent = nullptr;
    std::vector<int32_t> key;  // the P token ids of this node's page (empty at the root)
    page_ref page;             // device copy; invalid at the root and when evicted to host
    int32_t host_page = -1;    // host copy (host_tier page id), -1 when none
    std::shared_ptr<const load_ticket> loading;  // the load filling `page`, until it completes
    int64_t depth = 0;         // tokens from the root through this node
    std::map<std::vector<int32_t>, std::unique_ptr<node>> children;
    int32_t locks = 0;
    uint64_t last_use = 0;
    uint64_t snapshot_last_use = 0;
    std::shared_ptr<const boundary_snapshot> snapshot;
};

}  // namespace tandem::cache
