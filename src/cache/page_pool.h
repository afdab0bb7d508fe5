// cache/page_pool.h — The paged cache pool: one arena, sized from one memory budget, holding every
// layer's history pages and every sequence's fixed state, laid out by pool_geometry (layout.h).
//
// Owns: page and slot allocation (O(1) free lists), per-page owner / epoch / refcount / state,
// per-sequence page tables, quarantine of pages an aborted writer may still touch, and the
// stale-write counter. It does not own the prefix tree (it only offers retain/seal so pages can be
// shared) nor any numerics (codec.h turns rows into values).
//
// Threading: one owning thread (the scheduler) calls every mutating function. During a forward
// pass, worker threads may read rows and write through row_for_write(); they must not allocate,
// free or change page tables meanwhile (lockstep, design invariant 6).
//
// Page states and rules (check_integrity() asserts them):
//   free         refcount 0, on the free list, no owner; reads and writes rejected
//   allocated    refcount >= 1; writable only by (page, epoch) of the current allocation, and
//                only until sealed; readable by every sequence holding a reference
//   sealed       allocated + immutable history (complete page, shareable via retain_page)
//   quarantined  an aborted request's page that a writer (transfer, copy thread) may still
//                touch: not on the free list, every write rejected; it returns to the free list
//                when the writer releases it (release_quarantine) or its lease expires.
//   The epoch of a page changes on every allocation, so a write naming an older (page, epoch)
//   is rejected and counted, never applied. Sequence slots follow the same rules.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "cache/layout.h"
#include "core/status.h"

namespace tandem::cache {

using owner_id = uint64_t;  // a request id; 0 = no owner

struct page_ref {
    int32_t page = -1;
    uint32_t epoch = 0;
    bool valid() const { return page >= 0; }
    bool operator==(const page_ref&) const = default;
};

struct slot_ref {
    int32_t slot = -1;
    uint32_t epoch = 0;
    bool valid() const { return slot >= 0; }
    bool operator==(const slot_ref&) const = default;
};

enum class page_state : uint8_t { free, allocated, sealed, quarantined };

struct pool_options {
    int64_t memory_bytes = 0;   // the whole budget: pages + sequence slots (> 0)
    int64_t max_sequences = 0;  // sequence slots; 0 = auto (see plan_pool_split)
};

// How a budget splits into sequence slots and pages (also what `tandem plan` prints).
struct pool_split {
    int64_t num_slots = 0;
    int64_t num_pages = 0;
    int64_t tokens = 0;  // num_pages * page_size: history tokens the pool holds in total
};
// Auto slots: as many as fit in 1/8 of the budget, clamped to [1, 1024], and never so many that
// fewer than one page per slot remains. Errors when the budget cannot hold one slot and one page.
result<pool_split> plan_pool_split(const layout_spec& layout, const pool_options& opt);

// An arena the pool does not own and never dereferences (a GPU slab): the pool keeps metadata,
// free lists and epochs on the host and hands out addresses base + offset, which only the arena's
// owner (its kernels) reads or writes. `write` copies host bytes into it (h2d), `read` copies its
// bytes to the host (d2h); everything outside the forward that moves pool bytes (sequence state
// reset, snapshots, the host tier, pd transfers) goes through page_pool::read_bytes/write_bytes,
// which use them. Both must be complete when they return as far as the arena's owner is concerned:
// the host buffer may be reused at once, and the owner's later work (kernels on the same stream)
// sees the bytes written. Without `read` the pool still serves, but those paths report an error.
//
// Optional, for pd between two pools in one device space (both engines on one GPU): `copy` moves
// bytes from another arena of the same `space` into this one without the host (d2d; complete,
// as `write`, when it returns as far as this arena's owner is concerned), and `checksum` is the
// device XXH3-64 of bytes in the arena (equal to libxxhash's XXH3_64bits), so a landed span is
// verified where it lies instead of being read back.
struct external_arena {
    std::byte* base = nullptr;
    int64_t bytes = 0;  // at least pool_geometry(...).total_bytes() for the split
    std::function<status(std::byte* dst, const std::byte* host_src, int64_t n)> write;
    std::function<status(std::byte* host_dst, const std::byte* src, int64_t n)> read = {};
    std::function<status(std::byte* dst, const std::byte* same_space_src, int64_t n)> copy = {};
    std::function<result<uint64_t>(const std::byte* src, int64_t n)> checksum = {};
    // Arenas with equal nonzero `space` address one memory (one process's GPU 0, or the host
    // emulation): `copy` may read any of them. 0: no peer arena is reachable.
    uint64_t space = 0;
};

struct pool_stats {
    int64_t pages_total = 0;
    int64_t pages_free = 0;
    int64_t pages_quarantined = 0;
    int64_t slots_total = 0;
    int64_t slots_free = 0;
    int64_t stale_writes_rejected = 0;  // writes naming a stale/freed/sealed/quarantined target
    int64_t leases_expired = 0;         // quarantined pages/slots freed by lease expiry
};

class page_pool {
public:
    static result<std::unique_ptr<page_pool>> create(const layout_spec& layout,
                                                     const pool_options& opt);
    // The same pool over `arena` (see external_arena); errors when it is smaller than the split
    // the budget gives, or has no base or writer. The caller keeps the arena alive and frees it.
    static result<std::unique_ptr<page_pool>> create_external(const layout_spec& layout,
                                                              const pool_options& opt,
                                                              external_arena arena);
    ~page_pool();
    page_pool(const page_pool&) = delete;
    page_pool& operator=(const page_pool&) = delete;

    const layout_spec& layout() const { return layout_; }
    const pool_geometry& geometry() const { return geometry_; }
    // False for an external arena: its addresses are not host memory.
    bool host_addressable() const { return !external_.write; }
    std::byte* arena() { return arena_; }
    const std::byte* arena() const { return arena_; }
    // Copies between pool addresses (from the accessors below) and host memory: memcpy for the
    // pool's own arena, the external arena's read/write otherwise. The only way code outside the
    // forward may touch pool bytes, so it works for a device arena too.
    status read_bytes(std::byte* host_dst, const std::byte* pool_src, int64_t n) const;
    status write_bytes(std::byte* pool_dst, const std::byte* host_src, int64_t n) const;
    // XXH3-64 of pool bytes where they lie: host XXH3 for the pool's own arena, the arena's device
    // checksum for an external one (a read-back and the host XXH3 when it has none).
    result<uint64_t> checksum_bytes(const std::byte* pool_src, int64_t n) const;
    // Device-to-device: whether `src`'s arena is reachable by this arena's copy (both external,
    // one nonzero space, a copy function), and the copy itself (`src_ptr` bounds-checked against
    // `src`'s arena, `pool_dst` against ours). Reads only src's bytes, never its metadata, so it
    // may run on this pool's thread while src's owner works (the caller keeps the bytes held).
    bool can_copy_from(const page_pool& src) const;
    status copy_from(std::byte* pool_dst, const page_pool& src, const std::byte* src_ptr, int64_t n) const;
    // A process-unique identity, so a message can name this pool (pd PAGE_SPAN).
    uint64_t id() const { return id_; }
    int64_t arena_bytes() const { return arena_bytes_; }
    pool_stats stats() const;

    // --- Pages -------------------------------------------------------------------------------
    bool can_alloc_pages(int64_t n) const { return n <= static_cast<int64_t>(free_pages_.size()); }
    page_ref alloc_page(owner_id owner);  // invalid ref when the pool is full
    void retain_page(page_ref ref);       // one more reader (sharing a sealed page)
    void release_page(page_ref ref);      // drop a reference; the last one frees the page
    void seal_page(page_ref ref);         // complete history: no more writes, shareable
    // An aborted request's unsealed page (refcount 1): held until the writer releases it or
    // `lease_deadline_ns` (caller's clock) passes.
    void quarantine_page(page_ref ref, owner_id writer, int64_t lease_deadline_ns);
    int64_t release_quarantine(owner_id writer);  // returns pages+slots freed
    int64_t expire_leases(int64_t now_ns);        // returns pages+slots freed
    page_state state_of(int32_t page) const { return pages_[page].state; }
    uint32_t epoch_of(int32_t page) const { return pages_[page].epoch; }
    owner_id owner_of(int32_t page) const { return pages_[page].owner; }
    int32_t refcount_of(int32_t page) const { return pages_[page].refcount; }

    // Raw page access for transfers and the host tier. Writes are checked against (page, epoch).
    std::byte* page_bytes_for_write(page_ref ref, int32_t buffer_idx);  // nullptr if stale
    const std::byte* page_bytes(int32_t page, int32_t buffer_idx) const;

    // --- Sequences ---------------------------------------------------------------------------
    slot_ref alloc_sequence(owner_id owner);  // invalid ref when no slot is free
    // Releases the slot's page references (shared pages survive) and frees the slot.
    void free_sequence(slot_ref s);
    // Aborted request: unsealed pages and the slot are quarantined for `writer`; sealed pages
    // are released.
    void abort_sequence(slot_ref s, owner_id writer, int64_t lease_deadline_ns);
    bool is_current(slot_ref s) const;
    owner_id sequence_owner(slot_ref s) const;

    // Appends a page the sequence already holds a reference to (alloc_page or retain_page).
    void append_page(slot_ref s, page_ref ref);
    // Allocates pages so the table covers `tokens` tokens; false (nothing allocated) when the
    // pool lacks pages.
    bool ensure_capacity(slot_ref s, int64_t tokens);
    std::span<const page_ref> page_table(slot_ref s) const;

    // Rows of history buffer (layer, kind) of a sequence, by compressed row index w (the row of
    // tokens [w*ratio, (w+1)*ratio)); row_index_of(pos) = pos / ratio.
    const std::byte* row(slot_ref s, int32_t layer, buffer_kind kind, int64_t row_index) const;
    // nullptr (and counted) when the slot or the page (epoch in the table) is stale, sealed or
    // quarantined.
    std::byte* row_for_write(slot_ref s, int32_t layer, buffer_kind kind, int64_t row_index);
    // The window ring slot of token position `pos` (pos % window rows) and compressor rings.
    const std::byte* window_row(slot_ref s, int32_t layer, int64_t pos) const;
    std::byte* window_row_for_write(slot_ref s, int32_t layer, int64_t pos);
    float* compressor_state_for_write(slot_ref s, int32_t layer, state_kind kind);
    const float* compressor_state(slot_ref s, int32_t layer, state_kind kind) const;
    // Sequence start: window zeroed, compressor rings kv = 0, score = -inf (dsv4-model.md §3.3).
    void reset_sequence_state(slot_ref s);
    std::byte* slot_bytes_for_write(slot_ref s);  // whole slot (transfers); nullptr if stale
    const std::byte* slot_bytes(int32_t slot) const;

    // Asserts every rule in the table above (free lists, refcounts, page tables).
    void check_integrity() const;

private:
    struct page_meta {
        page_state state = page_state::free;
        uint32_t epoch = 0;
        int32_t refcount = 0;
        owner_id owner = 0;
        int64_t lease_deadline_ns = 0;
    };
    struct slot_meta {
        page_state state = page_state::free;  // free | allocated | quarantined
        uint32_t epoch = 0;
        owner_id owner = 0;
        int64_t lease_deadline_ns = 0;
        std::vector<page_ref> pages;
    };

    page_pool(const layout_spec& layout, const pool_split& split, std::byte* arena, int64_t bytes);
    bool page_writable(page_ref ref) const;
    bool slot_current(slot_ref s) const;
    const page_ref* page_for_row(slot_ref s, int32_t buffer_idx, int64_t row_index,
                                 int64_t* row_in_page) const;
    void free_page_now(int32_t page);
    void free_slot_now(int32_t slot);

    layout_spec layout_;
    pool_geometry geometry_;
    std::byte* arena_;
    int64_t arena_bytes_;
    external_arena external_;  // write set: not ours, never dereferenced
    uint64_t id_;
    std::vector<page_meta> pages_;
    std::vector<int32_t> free_pages_;  // a stack: O(1) alloc and free
    std::vector<slot_meta> slots_;
    std::vector<int32_t> free_slots_;
    std::vector<int32_t> quarantined_pages_;
    std::vector<int32_t> quarantined_slots_;
    // Atomic: the forward pass asks for rows to write from several threads at once (a layer's
    // sequences compress in parallel), and a rejected request counts here.
    std::atomic<int64_t> stale_writes_{0};
    int64_t leases_expired_ = 0;
};

}  // namespace tandem::cache
