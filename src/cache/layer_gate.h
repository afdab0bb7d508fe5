// cache/layer_gate.h — One gate per layer (design invariant 7, prefix-cache.md §5.7): the only way
// for the forward pass to reach any buffer of layer l is a layer_view, and the only way to get a
// layer_view is layer_gate::wait(l), which returns once every load that writes into layer l has
// landed (window rows, compressed rows, index-K rows, compressor state — all of them, one signal).
//
// Why a capability type and not a convention: sglang#22811 was one accessor (index-K) that forgot
// to call wait_layer_transfer(). Here the model never holds the page pool: model::forward receives
// a layer_gate, and layer_view's constructor is private to the gate, so an ungated read or write
// of any kind does not compile.
//
// load_ticket is one asynchronous load (host tier → pool, snapshot → slot). Its producer (the copy
// thread) copies, for layer l, every kind LayoutSpec lists for l (layout_spec::layers()[l]), then
// signals ready(l) once. A batch whose sequences came from several tickets waits on all of them; a
// batch without loads has no tickets, so hits and misses run the same code.
//
// Test-only (prefix-cache.md §5.7 "debug mode"): a ticket may carry the destination regions of
// its copies, filled with a sentinel before the copy was queued; wait(l) then checks that none of
// layer l's destinations still holds the sentinel — an error naming layer and kind if one does.
// The skip-gate switch makes wait(l) return without waiting, which is how the tests prove that the
// sentinel check fires (it must, when a load is delayed and the gate is skipped).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cache/page_pool.h"
#include "core/status.h"

namespace tandem::cache {

inline constexpr std::byte k_load_sentinel{0xFF};  // NaN in fp8 e4m3, bf16 and fp32 alike

// A destination a load writes (recorded only when sentinel checking is on). Its owner — the
// history page or the slot written — says whether the bytes still belong to this load: a batch
// also waits on loads of other requests whose pages it shares, and once such a request ended, its
// slot may hold a newer load's sentinel that this batch never reads.
struct load_destination {
    int32_t layer = 0;
    std::string kind;  // buffer_kind_name / state_kind_name
    std::byte* bytes = nullptr;
    int64_t size = 0;
    page_ref page;  // valid for a history page
    slot_ref slot;  // valid for slot state (window rows, compressor rings)
};

class load_ticket {
public:
    load_ticket(int32_t num_layers, bool skip_gate);

    // --- producer (copy thread) ---
    // False when the load was cancelled: write nothing more.
    bool begin_layer(int32_t layer);
    void end_layer(int32_t layer);  // layer `layer` is complete: ready(layer)
    // Test delays: sleeps up to `ms`; false (stop copying, then abandon_layer) when cancelled.
    bool pause(int64_t ms);
    void abandon_layer();
    void fail(std::string why);     // nothing more will land (copy thread stopping)

    // --- consumer ---
    // Blocks until layer `layer` landed, the load failed, or `deadline_ms` (monotonic) passed.
    status wait_layer(int32_t layer, int64_t deadline_ms) const;
    // No further writes after this returns (waits for at most the layer being copied).
    void cancel();
    bool complete() const;
    int32_t num_layers() const { return num_layers_; }
    bool skip_gate() const { return skip_gate_; }

    // Sentinel checking (test-only): destinations are recorded at planning time.
    void add_destination(load_destination d) { destinations_.push_back(std::move(d)); }
    const std::vector<load_destination>& destinations() const { return destinations_; }

    // When the load was queued (steady clock ns), for the load latency histogram.
    int64_t created_ns = 0;

private:
    const int32_t num_layers_;
    const bool skip_gate_;
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    int32_t landed_ = 0;  // layers [0, landed_) are ready (the producer goes in layer order)
    bool copying_ = false;
    bool cancelled_ = false;
    std::string failed_;
    std::vector<load_destination> destinations_;
};

class layer_gate;

// Everything the forward pass may touch of one layer, for the sequences of the batch.
class layer_view {
public:
    int32_t layer() const { return layer_; }
    const layout_spec& layout() const { return pool_->layout(); }
    // The kinds this layer has: the same LayoutSpec entry the loader copies from.
    const layer_layout& kinds() const { return pool_->layout().layers()[static_cast<size_t>(layer_)]; }

    const std::byte* row(slot_ref s, buffer_kind kind, int64_t row_index) const {
        return pool_->row(s, layer_, kind, row_index);
    }
    std::byte* row_for_write(slot_ref s, buffer_kind kind, int64_t row_index) const {
        return pool_->row_for_write(s, layer_, kind, row_index);
    }
    const std::byte* window_row(slot_ref s, int64_t pos) const { return pool_->window_row(s, layer_, pos); }
    // Bulk reads (codec::decode_rows): the window ring is layout().window_rows() rows of
    // layout().kv_row().bytes back to back, position p in row p % window_rows(); a history row is
    // followed in memory by the next rows of its page, rows_left_in_page(kind, i) of them with it.
    const std::byte* window_ring(slot_ref s) const { return pool_->window_row(s, layer_, 0); }
    int64_t rows_left_in_page(buffer_kind kind, int64_t row_index) const {
        const int64_t per_page = layout().buffers()[static_cast<size_t>(layout().buffer_index(layer_, kind))].rows_per_page;
        return per_page - row_index % per_page;
    }
    std::byte* window_row_for_write(slot_ref s, int64_t pos) const {
        return pool_->window_row_for_write(s, layer_, pos);
    }
    float* compressor_state_for_write(slot_ref s, state_kind kind) const {
        return pool_->compressor_state_for_write(s, layer_, kind);
    }

private:
    friend class layer_gate;
    layer_view(page_pool* pool, int32_t layer) : pool_(pool), layer_(layer) {}
    page_pool* pool_;
    int32_t layer_;
};

class layer_gate {
public:
    // `tickets`: the loads the batch's sequences depend on (empty: nothing to wait for).
    // `timeout_ms`: how long wait() waits for one layer before failing the step.
    explicit layer_gate(page_pool& pool, std::vector<std::shared_ptr<const load_ticket>> tickets = {},
                        int64_t timeout_ms = 30000);

    // Metadata the forward pass validates a batch against (no buffer access).
    const layout_spec& layout() const { return pool_.layout(); }
    bool is_current(slot_ref s) const { return pool_.is_current(s); }
    int64_t capacity_tokens(slot_ref s) const {
        return static_cast<int64_t>(pool_.page_table(s).size()) * pool_.layout().page_size();
    }

    // The view of layer `layer`, once every ticket's layer landed. Errors: a load that failed or
    // missed the deadline; with sentinel checking, a destination still holding the sentinel.
    result<layer_view> wait(int32_t layer) const;

private:
    bool still_owned(const load_destination& d) const;  // not freed or reused since the load

    page_pool& pool_;
    std::vector<std::shared_ptr<const load_ticket>> tickets_;
    int64_t timeout_ms_;
};

}  // namespace tandem::cache
