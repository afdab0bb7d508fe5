// topo/pd_transfer.h — Moving one request's prefilled state into the decode pool, safely.
//
// Owns: turning a prefilled sequence into PAGE_WRITE / STATE_WRITE messages (prefill side), and
// on the decode side: applying a write only when its checksum verifies and its (page, epoch) is
// current (invariants 2, 3), the per-request tracker that opens one gate per layer once every
// span of that layer landed verified (invariant 7) and knows when PREFILL_DONE's count and
// whole-transfer checksum match, and the quarantine bookkeeping of aborted requests.
//
// Both sides derive the list of spans from cache::plan_transfer over the SAME layout, the job's
// destination pages (the first ceil(tokens / page_size)), the prompt length and the slot, so the
// decode side knows exactly which writes to expect and rejects anything else.
//
// Threading: a tracker and the pool belong to the decode scheduler thread; the transport thread
// only decodes frames and posts the messages there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/page_pool.h"
#include "cache/transfer.h"
#include "topo/pd_protocol.h"
#include "transport/buffer_channel.h"

namespace tandem::topo {

// XXH3-64 over the per-span checksums (u64 little-endian) in plan order: what PREFILL_DONE
// carries so the receiver can tell "every write verified" from "the right writes verified".
uint64_t transfer_checksum(std::span<const uint64_t> span_checksums);

// ---- Prefill side --------------------------------------------------------------------------

struct sent_transfer {
    uint32_t writes = 0;
    uint64_t checksum = 0;
};
using emit_fn = std::function<status(pd_message&&)>;

// Streams one job's writes while the prompt is computed: each page the computation has wholly
// covered is sent as soon as it is (so the transport moves it while the next chunk computes);
// the partial last page and the sequence state when the prompt is done. `src_pages` are the
// prefill pool's pages holding the prompt, in order, and `src_slot` its slot, as they are at each
// call (a preempted prefill recomputes into other pages; its bytes are bitwise the same, so what
// was sent stays valid). Every call stops at the first error `emit` returns (an abort arrived,
// the peer is gone). The whole-transfer checksum covers every span in plan order, as the
// receiver computes it, whatever order they were sent in.
// pd with both pools in one device space (page_pool::can_copy_from): history spans go as
// PAGE_SPAN, naming their source bytes, checksummed by the source pool's device XXH3; the state
// spans (small, and in a slot the next request reuses at once) are still carried as STATE_WRITE.
//
// transport.kind = "nccl" is the same with `send_buffer` set: each history span is posted on the
// buffer channel (before its frame) and announced by a PAGE_BUFFER instead of named.
struct span_naming {
    // Called once per source page, before the first PAGE_SPAN naming it, on the sender's thread
    // (the source pool's owner): the caller takes a hold so that page is neither freed nor reused
    // until the decode side released the request's spans (pd_holds.h).
    std::function<void(cache::page_ref)> hold;
    // nccl: posts the span's bytes (in the source pool's device space) to the decode peer.
    std::function<status(const std::byte* src, int64_t bytes)> send_buffer = {};
};

class transfer_sender {
public:
    explicit transfer_sender(const prefill_job_msg& job, std::optional<span_naming> naming = std::nullopt)
        : job_(&job), naming_(std::move(naming)) {}
    status send_complete_pages(const cache::page_pool& src, std::span<const int64_t> src_pages,
                               int64_t src_slot, int64_t computed_tokens, const emit_fn& emit);
    result<sent_transfer> finish(const cache::page_pool& src, std::span<const int64_t> src_pages,
                                 int64_t src_slot, const emit_fn& emit);
    int64_t writes_sent() const { return sent_count_; }

private:
    status send(const cache::page_pool& src, std::span<const int64_t> src_pages, int64_t src_slot,
                int64_t complete_pages, const emit_fn& emit);
    status send_span(const cache::page_pool& src, const cache::transfer_span& s, int64_t src_page,
                     size_t k, const emit_fn& emit);
    const prefill_job_msg* job_;
    std::optional<span_naming> naming_;
    std::unordered_set<uint64_t> held_;  // (page, epoch) of source pages already held
    std::vector<uint64_t> sums_;    // per plan span, once sent
    std::vector<uint8_t> sent_;
    int64_t sent_count_ = 0;
};

// All of a finished prompt's writes at once (transfer_sender::finish on a fresh sender).
result<sent_transfer> send_transfer(const cache::page_pool& src, std::span<const int64_t> src_pages,
                                    int64_t src_slot, const prefill_job_msg& job,
                                    const emit_fn& emit);

// ---- Decode side: single writes --------------------------------------------------------------

// Verifies the checksum, then writes into the page only if (page, epoch) is current; a stale
// target is rejected (counted by the pool) and nothing is copied. data_loss on a bad checksum.
status apply_page_write(cache::page_pool& pool, const page_write_msg& w);
// A PAGE_SPAN: the named source span must lie inside the named page's buffer of `source` (the pool
// this side was given; anything else is refused as data_loss), the destination (page, epoch) must be
// current; then a device-to-device copy, and the device XXH3 of the landed bytes must equal the
// source's checksum (data_loss otherwise: the request fails, never decodes).
status apply_page_span(cache::page_pool& pool, const cache::page_pool* source, const page_span_msg& w);
// A PAGE_BUFFER: exactly one receive (into the page) or discard (a refused write) is posted on
// `ch` for it, whatever happens — the channel matches by order — then flushed; the landed bytes'
// device XXH3 (the channel's checksum_device) must equal the frame's checksum.
status apply_page_buffer(cache::page_pool& pool, transport::buffer_channel& ch, transport::peer_id peer,
                         int64_t flush_timeout_ms, const page_buffer_msg& w);
status apply_state_write(cache::page_pool& pool, const state_write_msg& w);

struct receive_stats {
    int64_t writes_applied = 0;
    int64_t stale_rejected = 0;
    int64_t checksum_failures = 0;  // a write's, or PREFILL_DONE's whole-transfer checksum
    int64_t unexpected = 0;  // a write the plan does not contain, or a duplicate
    int64_t spans_copied = 0;  // PAGE_SPANs landed device to device (of writes_applied)
};

// ---- Decode side: one request ------------------------------------------------------------------

class transfer_tracker {
public:
    // What the decode side itself expects: its page table, slot and prompt length.
    transfer_tracker(const cache::page_pool& pool, uint64_t request_id,
                     std::span<const cache::page_ref> pages, cache::slot_ref slot, int64_t tokens,
                     int64_t deadline_ms);

    status apply(cache::page_pool& pool, const page_write_msg& w);
    status apply(cache::page_pool& pool, const state_write_msg& w);
    status apply(cache::page_pool& pool, const page_span_msg& w, const cache::page_pool* source);
    // Posts nothing on a write it refuses: the caller then discards the buffer (decode_link).
    status apply(cache::page_pool& pool, const page_buffer_msg& w, transport::buffer_channel& ch,
                 transport::peer_id peer, int64_t flush_timeout_ms, bool* consumed);
    // PREFILL_DONE: ok once every expected write arrived verified and the count and whole
    // checksum agree. Transports deliver in order, so a missing write here means it was dropped
    // (corrupt) and the request fails now rather than at its deadline.
    status finish(const prefill_done_msg& done);

    uint64_t request_id() const { return request_id_; }
    // Gate of layer position l (index into layout_spec::layers()).
    bool layer_ready(size_t l) const { return layer_received_[l] == layer_expected_[l]; }
    int64_t layers_ready() const;
    bool complete() const { return done_ && failure_.is_ok(); }
    bool failed() const { return !failure_.is_ok(); }
    const status& failure() const { return failure_; }
    bool expired(int64_t now_ms) const { return !complete() && now_ms >= deadline_ms_; }
    const receive_stats& stats() const { return stats_; }
    int64_t expected_writes() const { return static_cast<int64_t>(plan_.spans.size()); }

private:
    status accept(cache::span_kind kind, int32_t index, int32_t target, uint64_t request_id,
                  int64_t bytes, int32_t* span_out);
    status record(int32_t span, uint64_t checksum, status applied);
    // accept() for a history write, plus the epoch the table holds.
    status accept_page(cache::page_pool& pool, cache::page_ref page, int32_t layer, cache::buffer_kind kind,
                       uint64_t request_id, int64_t bytes, int32_t* span_out);
    status fail(status st);

    uint64_t request_id_;
    int64_t deadline_ms_;
    cache::transfer_plan plan_;
    std::unordered_map<uint64_t, int32_t> span_of_;  // (kind, index, page/slot) → span
    std::vector<uint64_t> checksums_;                // per span, once verified
    std::vector<uint8_t> received_;
    std::vector<int32_t> layer_of_span_;             // layer position of each span
    std::vector<int32_t> layer_expected_, layer_received_;
    int64_t received_total_ = 0;
    bool done_ = false;
    status failure_;
    receive_stats stats_;
};

// ---- Decode side: aborts ------------------------------------------------------------------------

// Pages (and the slot) of an aborted request stay quarantined until the prefill side acks that
// no write can follow, or the lease expires (invariant 2). The writer id is the request id.
class abort_book {
public:
    void begin(cache::page_pool& pool, uint64_t request_id, cache::slot_ref slot,
               int64_t lease_deadline_ns);
    // ABORT_ACK: frees the quarantine; false for a request this book does not hold (counted).
    bool on_ack(cache::page_pool& pool, uint64_t request_id);
    int64_t expire(cache::page_pool& pool, int64_t now_ns);  // pages+slots freed
    bool pending(uint64_t request_id) const { return pending_.count(request_id) != 0; }
    size_t size() const { return pending_.size(); }
    int64_t unknown_acks() const { return unknown_acks_; }

private:
    std::unordered_map<uint64_t, int64_t> pending_;  // request → lease deadline
    int64_t unknown_acks_ = 0;
};

}  // namespace tandem::topo
