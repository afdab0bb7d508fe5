// cache/transfer.h — Transfer descriptors and the host-memory mirror, both from one LayoutSpec.
//
// Owns: "which byte ranges of which pages move for a request" between two arenas laid out by
// pool_geometry over the SAME layout_spec (device pool ↔ host mirror for the host tier, prefill
// pool ↔ decode pool for pd), per-span XXH3-64 checksums, and a reference memcpy executor.
// Spans are ordered layer by layer, and every layer lists every kind layout_spec gives it, so a
// consumer can signal one gate per layer after that layer's spans landed (design invariant 7).
//
// A span never crosses a page: each (page, layer, kind) is one span, so checksums are per page
// and buffer kind (design invariant 3). A partial last page moves only its complete rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "core/status.h"

namespace tandem::cache {

enum class span_kind : uint8_t { history, state };

struct transfer_span {
    int32_t layer = 0;
    span_kind kind = span_kind::history;
    int32_t index = 0;        // buffer index (history) or state index (state) in layout_spec
    int64_t src_offset = 0;   // bytes from the start of the source arena
    int64_t dst_offset = 0;   // bytes from the start of the destination arena
    int64_t bytes = 0;
    page_ref dst_page;        // history: destination page (epoch checked when it is a pool)
    slot_ref dst_slot;        // state: destination slot (epoch checked when it is a pool)
    const char* what = "";    // the buffer or state kind name (for messages)
};

struct transfer_plan {
    std::vector<transfer_span> spans;          // ordered by layer
    std::vector<int32_t> layer_end;            // spans of layer l: [layer_end[l-1], layer_end[l])
    int64_t total_bytes = 0;
};

// One page of the request: where it is in the source and where it goes.
struct page_move {
    int64_t src_page = 0;
    page_ref dst;  // for a host mirror destination, epoch is ignored
};

// History: the request's pages in order; `tokens` = tokens of history the pages hold (the last
// page may be partial). State: optionally one sequence slot (src_slot < 0: none).
transfer_plan plan_transfer(const pool_geometry& src, const pool_geometry& dst,
                            std::span<const page_move> pages, int64_t tokens, int64_t src_slot,
                            slot_ref dst_slot);

// XXH3-64 of each span's source bytes, in span order.
std::vector<uint64_t> checksum_spans(const transfer_plan& plan, const std::byte* src_arena);
// Verifies the destination bytes against checksums; data_loss naming layer and kind on mismatch.
status verify_spans(const transfer_plan& plan, const std::byte* dst_arena,
                    std::span<const uint64_t> checksums);

// Reference executor into a raw arena (host mirror): memcpy per span.
void execute_transfer(const transfer_plan& plan, const std::byte* src_arena, std::byte* dst_arena);
// Into a pool: every destination (page, epoch) and slot is checked first; if any is stale the
// whole transfer is rejected (nothing copied, each stale target counted by the pool).
status execute_transfer_into_pool(const transfer_plan& plan, const std::byte* src_arena,
                                  page_pool& dst);

// The host-memory mirror: the same geometry as a pool (layer-major per kind, same rows, pages
// and slot layout) with its own page count, so a host page holds exactly one device page.
class host_mirror {
public:
    static result<std::unique_ptr<host_mirror>> create(const layout_spec& layout,
                                                       int64_t num_pages, int64_t num_slots);
    ~host_mirror();
    host_mirror(const host_mirror&) = delete;
    host_mirror& operator=(const host_mirror&) = delete;

    const layout_spec& layout() const { return layout_; }
    const pool_geometry& geometry() const { return geometry_; }
    std::byte* arena() { return arena_; }
    const std::byte* arena() const { return arena_; }

    int64_t alloc_page();  // -1 when full; O(1)
    void free_page(int64_t page);
    int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

private:
    host_mirror(const layout_spec& layout, int64_t pages, int64_t slots, std::byte* arena,
                int64_t bytes);
    layout_spec layout_;
    pool_geometry geometry_;
    std::byte* arena_;
    int64_t bytes_;
    std::vector<int64_t> free_;
    std::vector<uint8_t> used_;
};

}  // namespace tandem::cache
