// cache/host_tier.h — The host-memory tier of the prefix cache (prefix-cache.md §5.6, §5.7).
//
// Owns: a host arena of `cache.host_memory_bytes`, one allocator of host page ids (ONE presence
// unit: a host page id addresses that page's slot in every layer's every history buffer, so kinds
// can never be present or evicted separately), and the copy thread that moves bytes:
//   store  device page → host page (write-through, queued when the prefix tree adopts a page);
//          present(hp) turns true when it landed. Until then the device page must not be reused
//          (the tree does not evict it: the fence of §5.5).
//   load   host pages → freshly allocated device pages, plus a boundary snapshot → a slot, layer by
//          layer: for layer l it copies every kind layout_spec::layers()[l] lists (the list the
//          layer_view is built from), then signals the ticket's ready(l) once (layer_gate.h).
// It does not decide what to store, load or evict: the prefix tree (prefix_tree.h) does, on the
// scheduler thread.
//
// Layout: the host arena is a pool_geometry with host pages and no slots — layer-major per kind,
// the same arrangement and sizes as the device pool (from LayoutSpec; sglang#13431 was a host
// mirror sized for the wrong layout). On the CPU backend both tiers are RAM, but the tier is real:
// its own budget, its own arena, copies only on the copy thread, device pages freed on eviction.
//
// Threading: every function but present() and stats() is called on the scheduler thread. The
// copy thread touches only arena bytes at addresses planned on the scheduler thread (never pool
// metadata). It is supervised: a heartbeat reports it to /health (pending while jobs wait).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/layer_gate.h"
#include "cache/layout.h"
#include "cache/page_pool.h"
#include "cache/snapshot.h"
#include "core/histogram.h"
#include "core/status.h"

namespace tandem {
class heartbeat;
}

namespace tandem::cache {

// Test-only switches (config keys cache.test_*; never set in production).
struct host_tier_test_hooks {
    std::string delay_kind;     // "" = every kind; else a buffer_kind / state_kind name
    int32_t delay_layer = -1;   // -1 = every layer
    int64_t delay_ms = 0;       // the copy thread sleeps this long before copying a matching kind
    bool sentinel = false;      // fill load destinations with k_load_sentinel, check before attention
    bool skip_gate = false;     // layer_gate::wait does not wait (proves the sentinel check fires)
    // The prefix cache evicts every unlocked device copy to host whenever a request ends, so
    // every later hit round-trips through host memory (T6: "every request round-trips").
    bool evict_on_release = false;
};

struct host_tier_options {
    int64_t memory_bytes = 0;                // > 0
    std::shared_ptr<heartbeat> beat;         // /health; may be null (unit tests)
    host_tier_test_hooks hooks;
};

struct host_tier_stats {
    int64_t pages_total = 0;
    int64_t pages_used = 0;
    int64_t bytes_total = 0;
    int64_t bytes_used = 0;
    int64_t stores = 0;         // pages written through to host
    int64_t loaded_pages = 0;   // pages loaded back to the device pool
    int64_t loads = 0;          // load tickets completed
};

// One page of a load: host page `host_page` → device page `device` (allocated by the caller).
struct page_load {
    int32_t host_page = -1;
    page_ref device;
};

// What a load copies, per layer, and which LayoutSpec entries it took them from.
struct load_plan {
    struct copy {
        std::byte* dst = nullptr;
        const std::byte* src = nullptr;
        int64_t bytes = 0;
        const char* kind = "";
        page_ref page;  // the history page written (invalid for slot state)
        slot_ref slot;  // the slot whose state is written (invalid for a history page)
    };
    std::vector<std::vector<copy>> per_layer;
    std::vector<std::vector<int32_t>> buffers_per_layer;  // layout_spec::buffers() indices
    std::vector<std::vector<int32_t>> states_per_layer;   // layout_spec::states() indices
};

// History pages a host budget holds (0 when it cannot hold one): what create() allocates and what
// `tandem plan` prints.
int64_t host_tier_pages(const layout_spec& layout, int64_t memory_bytes);

class host_tier {
public:
    static result<std::unique_ptr<host_tier>> create(page_pool& pool, host_tier_options opt);
    ~host_tier();  // drains the queue, then stops the copy thread
    host_tier(const host_tier&) = delete;
    host_tier& operator=(const host_tier&) = delete;

    const pool_geometry& geometry() const { return geometry_; }
    // Test hook API: switches for the loads queued from now on.
    void set_test_hooks(host_tier_test_hooks hooks);
    host_tier_test_hooks test_hooks() const;

    // Host page ids (one presence unit for every layer and kind).
    int32_t alloc_page();  // -1 when full
    void free_page(int32_t host_page);  // only a present (landed) page
    int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
    bool present(int32_t host_page) const;

    // Write-through of a sealed device page; present(host_page) turns true when it landed.
    void store(page_ref device, int32_t host_page);

    // The copies of a load (exposed for the one-source-of-truth test): host pages → device pages
    // and the snapshot's parts → `slot`, per layer, from layout_spec::layers().
    load_plan plan_load(std::span<const page_load> pages, slot_ref slot,
                        const boundary_snapshot* snap);
    // Queues a load; the ticket's layers become ready in order. `snap` stays alive with the job.
    std::shared_ptr<load_ticket> load(std::span<const page_load> pages, slot_ref slot,
                                      std::shared_ptr<const boundary_snapshot> snap);

    // Blocks until every queued job ran (flush, shutdown).
    void drain();
    host_tier_stats stats() const;
    histogram_snapshot load_latency() const { return load_seconds_.snapshot(); }

private:
    struct job {
        // store
        page_ref device;
        int32_t host_page = -1;
        // load
        std::shared_ptr<load_ticket> ticket;
        load_plan plan;
        std::shared_ptr<const boundary_snapshot> snap;
        int64_t pages = 0;
        host_tier_test_hooks hooks;
    };

    host_tier(page_pool& pool, host_tier_options opt, int64_t num_pages);
    void run();
    void run_store(const job& j);
    void run_load(job& j);
    static bool delay_for(const host_tier_test_hooks& h, load_ticket& t, const char* kind,
                          int32_t layer);
    std::byte* host_bytes(int32_t buffer_idx, int32_t host_page) const;

    page_pool& pool_;
    host_tier_options opt_;
    pool_geometry geometry_;
    std::unique_ptr<std::byte[]> arena_;
    std::vector<int32_t> free_;
    std::unique_ptr<std::atomic<uint8_t>[]> present_;

    mutable std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    std::deque<job> queue_;
    bool busy_ = false;
    bool stopping_ = false;

    std::atomic<int64_t> used_{0}, stores_{0}, loaded_pages_{0}, loads_{0};
    histogram load_seconds_;
    std::thread thread_;
};

}  // namespace tandem::cache
