// topo/pd_transfer.cpp — Sending a prefilled request's state, and receiving it verified.
#include "topo/pd_transfer.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/check.h"
#include "transport/wire.h"

namespace tandem::topo {

uint64_t transfer_checksum(std::span<const uint64_t> span_checksums) {
    std::vector<std::byte> bytes;
    bytes.reserve(span_checksums.size() * 8);
    transport::wire_writer w(bytes);
    for (uint64_t c : span_checksums) w.u64(c);
    return XXH3_64bits(bytes.data(), bytes.size());
}

namespace {

int64_t pages_needed(const cache::layout_spec& l, int64_t tokens) {
    return (tokens + l.page_size() - 1) / l.page_size();
}

uint64_t span_key(cache::span_kind kind, int32_t index, int32_t target) {
    return (static_cast<uint64_t>(kind == cache::span_kind::state) << 63) |
           (static_cast<uint64_t>(static_cast<uint32_t>(index) & 0x7fffffffu) << 32) |
           static_cast<uint32_t>(target);
}

pd_message make_write(const cache::transfer_span& s, const cache::layout_spec& l,
                      uint64_t request_id, std::vector<std::byte> data, uint64_t checksum) {
    if (s.kind == cache::span_kind::history) {
        page_write_msg w;
        w.request_id = request_id;
        w.page = s.dst_page;
        w.layer = s.layer;
        w.kind = l.buffers()[s.index].kind;
        w.checksum = checksum;
        w.data = std::move(data);
        return w;
    }
    state_write_msg w;
    w.request_id = request_id;
    w.slot = s.dst_slot;
    w.layer = s.layer;
    w.kind = l.states()[s.index].kind;
    w.checksum = checksum;
    w.data = std::move(data);
    return w;
}

}  // namespace

status transfer_sender::send(const cache::page_pool& src, std::span<const int64_t> src_pages,
                             int64_t src_slot, int64_t complete_pages, const emit_fn& emit) {
    const prefill_job_msg& job = *job_;
    const cache::layout_spec& l = src.layout();
    const int64_t tokens = static_cast<int64_t>(job.token_ids.size());
    const int64_t n = pages_needed(l, tokens);
    if (static_cast<int64_t>(src_pages.size()) < n || static_cast<int64_t>(job.pages.size()) < n ||
        src_slot < 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("request {}: {} tokens need {} pages (prefill has {}, job "
                                      "names {}) and a prefill slot", job.request_id, tokens, n,
                                      src_pages.size(), job.pages.size()));
    }
    std::vector<cache::page_move> moves(static_cast<size_t>(n));
    int32_t max_page = 0;
    for (int64_t i = 0; i < n; ++i) {
        moves[i] = {src_pages[i], job.pages[i]};
        max_page = std::max(max_page, job.pages[i].page);
    }
    // The decode pool's offsets are not ours to know; a geometry just big enough for the named
    // pages keeps plan_transfer's bookkeeping valid (destination offsets are unused here).
    cache::pool_geometry dst(l, max_page + 1, job.slot.slot + 1);
    cache::transfer_plan plan = cache::plan_transfer(src.geometry(), dst, moves, tokens, src_slot,
                                                     job.slot);
    if (sums_.empty()) {
        sums_.assign(plan.spans.size(), 0);
        sent_.assign(plan.spans.size(), 0);
    }
    TANDEM_CHECK(sums_.size() == plan.spans.size());  // the plan depends on the job alone
    // Which job page (0..n-1) each history span belongs to: its destination names it.
    std::unordered_map<int32_t, int64_t> page_index;
    for (int64_t i = 0; i < n; ++i) page_index[job.pages[i].page] = i;
    for (size_t k = 0; k < plan.spans.size(); ++k) {
        const cache::transfer_span& s = plan.spans[k];
        if (sent_[k]) continue;
        const bool ready = s.kind == cache::span_kind::history
                               ? page_index.at(s.dst_page.page) < complete_pages
                               : complete_pages >= n + 1;  // state: only when the prompt is done
        if (!ready) continue;
        if (naming_ && s.kind == cache::span_kind::history) {
            TANDEM_RETURN_IF_ERROR(send_span(src, s, src_pages[page_index.at(s.dst_page.page)], k, emit));
            continue;
        }
        // Read through the pool (d2h from a device arena); the checksum covers the bytes read.
        std::vector<std::byte> data(static_cast<size_t>(s.bytes));
        // Contexts are formatted only on failure: this runs for every span of every transfer.
        if (status read = src.read_bytes(data.data(), src.arena() + s.src_offset, s.bytes); !read)
            return read.with_context(fmt::format("request {}: reading the prefill pool", job.request_id));
        sums_[k] = XXH3_64bits(data.data(), data.size());
        sent_[k] = 1;
        ++sent_count_;
        TANDEM_RETURN_IF_ERROR(emit(make_write(s, l, job.request_id, std::move(data), sums_[k])));
    }
    return status::ok();
}

// The span stays where it is: hash it there (device XXH3), hold its page, name it (PAGE_SPAN) or
// post it on the buffer channel (PAGE_BUFFER). Ordering on a GPU: the hash is a launch on the legacy
// stream plus a blocking 8-byte download, so it returns only after the forward kernels that wrote
// the span finished — the copy (D2D on the legacy stream) or NCCL send (its own non-blocking stream)
// that follows reads final bytes.
status transfer_sender::send_span(const cache::page_pool& src, const cache::transfer_span& s,
                                  int64_t src_page, size_t k, const emit_fn& emit) {
    result<uint64_t> sum = src.checksum_bytes(src.arena() + s.src_offset, s.bytes);
    if (!sum) return sum.error().with_context(fmt::format("request {}: hashing a span of the prefill pool", job_->request_id));
    const cache::page_ref page{static_cast<int32_t>(src_page), src.epoch_of(static_cast<int32_t>(src_page))};
    if (held_.insert((static_cast<uint64_t>(page.page) << 32) | page.epoch).second) naming_->hold(page);
    sums_[k] = *sum;
    sent_[k] = 1;
    ++sent_count_;
    // The destination header both frames share (PAGE_WRITE's fields but the bytes).
    const auto head = [&](auto& m) {
        m.request_id = job_->request_id;
        m.page = s.dst_page;
        m.layer = s.layer;
        m.kind = src.layout().buffers()[s.index].kind;
        m.checksum = *sum;
        m.bytes = s.bytes;
    };
    if (naming_->send_buffer) {
        if (status posted = naming_->send_buffer(src.arena() + s.src_offset, s.bytes); !posted)
            return posted.with_context(fmt::format("request {}: posting a span on the buffer channel", job_->request_id));
        page_buffer_msg b;
        head(b);
        return emit(std::move(b));
    }
    page_span_msg w;
    head(w);
    w.src_pool = src.id();
    w.src_page = page;
    w.src_offset = s.src_offset;
    return emit(std::move(w));
}

status transfer_sender::send_complete_pages(const cache::page_pool& src,
                                            std::span<const int64_t> src_pages, int64_t src_slot,
                                            int64_t computed_tokens, const emit_fn& emit) {
    const int64_t tokens = static_cast<int64_t>(job_->token_ids.size());
    // A page is final once every token it covers was computed; the last, partial page (and the
    // state) only at the end: its rows are complete only for the whole prompt.
    const int64_t whole = std::min(computed_tokens, tokens) / src.layout().page_size();
    const int64_t final_pages = tokens % src.layout().page_size() == 0
                                    ? whole
                                    : std::min(whole, pages_needed(src.layout(), tokens) - 1);
    return send(src, src_pages, src_slot, final_pages, emit);
}

result<sent_transfer> transfer_sender::finish(const cache::page_pool& src,
                                              std::span<const int64_t> src_pages, int64_t src_slot,
                                              const emit_fn& emit) {
    const int64_t n = pages_needed(src.layout(), static_cast<int64_t>(job_->token_ids.size()));
    TANDEM_RETURN_IF_ERROR(send(src, src_pages, src_slot, n + 1, emit));
    return sent_transfer{static_cast<uint32_t>(sums_.size()), transfer_checksum(sums_)};
}

result<sent_transfer> send_transfer(const cache::page_pool& src, std::span<const int64_t> src_pages,
                                    int64_t src_slot, const prefill_job_msg& job,
                                    const emit_fn& emit) {
    transfer_sender sender(job);
    return sender.finish(src, src_pages, src_slot, emit);
}

// ------------------------------------------------------------------------------------------------

namespace {

status verify(uint64_t checksum, const std::vector<std::byte>& data, const char* what,
              uint64_t request_id, int32_t layer, const char* kind) {
    if (XXH3_64bits(data.data(), data.size()) == checksum) return status::ok();
    return make_error(error_code::data_loss,
                      fmt::format("{} of request {} layer {} {}: checksum mismatch ({} bytes); "
                                  "not applied", what, request_id, layer, kind, data.size()));
}

// The bytes where they landed hash to `checksum`: for a device arena by the device XXH3 (no read-back),
// so the checksum covers the bytes where the decode will read them.
status check_landed(const cache::page_pool& pool, const std::byte* dst, int64_t n, uint64_t checksum,
                    const char* what, uint64_t request_id, int32_t layer, const char* kind) {
    result<uint64_t> landed = pool.checksum_bytes(dst, n);
    if (!landed) return landed.error().with_context(fmt::format("{} of request {}: hashing the landed bytes", what, request_id));
    if (*landed == checksum) return status::ok();
    return make_error(error_code::data_loss,
                      fmt::format("{} of request {} layer {} {}: checksum mismatch after the bytes "
                                  "landed in the device pool ({} bytes)", what, request_id, layer, kind, n));
}

// Writes verified bytes into the pool. A device arena (not host-addressable) is written by an
// h2d copy the host cannot see land, so the landed bytes are hashed again where they lie.
status land(cache::page_pool& pool, std::byte* dst, const std::vector<std::byte>& data,
            uint64_t checksum, const char* what, uint64_t request_id, int32_t layer,
            const char* kind) {
    const int64_t n = static_cast<int64_t>(data.size());
    if (status wrote = pool.write_bytes(dst, data.data(), n); !wrote)
        return wrote.with_context(fmt::format("{} of request {} layer {} {}", what, request_id, layer, kind));
    if (pool.host_addressable()) return status::ok();
    return check_landed(pool, dst, n, checksum, what, request_id, layer, kind);
}

}  // namespace

// Stale targets are reported as out_of_range so callers can count them apart from corruption.
status apply_page_write(cache::page_pool& pool, const page_write_msg& w) {
    const cache::layout_spec& l = pool.layout();
    const int32_t bi = l.buffer_index(w.layer, w.kind);
    const char* kind = cache::buffer_kind_name(w.kind);
    if (bi < 0 || static_cast<int64_t>(w.data.size()) > l.buffers()[bi].bytes_per_page) {
        return make_error(error_code::data_loss,
                          fmt::format("PAGE_WRITE of request {}: layer {} has no {} buffer of "
                                      ">= {} bytes", w.request_id, w.layer, kind, w.data.size()));
    }
    TANDEM_RETURN_IF_ERROR(verify(w.checksum, w.data, "PAGE_WRITE", w.request_id, w.layer, kind));
    std::byte* dst = pool.page_bytes_for_write(w.page, bi);
    if (dst == nullptr) {
        return make_error(error_code::out_of_range,
                          fmt::format("PAGE_WRITE of request {} to page {} epoch {} rejected: "
                                      "the page is not current (stale epoch, freed, sealed or "
                                      "quarantined)", w.request_id, w.page.page, w.page.epoch));
    }
    return land(pool, dst, w.data, w.checksum, "PAGE_WRITE", w.request_id, w.layer, kind);
}

namespace {

// The named span must be the named page's buffer (or a prefix of it) in the source pool: a frame
// can only ever make us read bytes of a page that pool holds for it.
status check_source(const cache::page_pool* source, const page_span_msg& w, int32_t bi) {
    const auto refuse = [&](const char* why) {
        return make_error(error_code::data_loss,
                          fmt::format("PAGE_SPAN of request {} layer {}: {} (pool {:x}, page {}, offset {}, {} bytes)",
                                      w.request_id, w.layer, why, w.src_pool, w.src_page.page, w.src_offset, w.bytes));
    };
    if (source == nullptr || w.src_pool != source->id()) return refuse("names a pool this side cannot reach");
    const cache::pool_geometry& g = source->geometry();
    if (w.src_page.page >= g.num_pages()) return refuse("names a page outside the source pool");
    const int64_t start = g.page_offset(bi, w.src_page.page);
    if (w.src_offset != start || w.bytes > source->layout().buffers()[bi].bytes_per_page)
        return refuse("is not the named page's buffer");
    return status::ok();
}

}  // namespace

status apply_page_span(cache::page_pool& pool, const cache::page_pool* source, const page_span_msg& w) {
    const cache::layout_spec& l = pool.layout();
    const int32_t bi = l.buffer_index(w.layer, w.kind);
    const char* kind = cache::buffer_kind_name(w.kind);
    if (bi < 0 || w.bytes > l.buffers()[bi].bytes_per_page) {
        return make_error(error_code::data_loss,
                          fmt::format("PAGE_SPAN of request {}: layer {} has no {} buffer of "
                                      ">= {} bytes", w.request_id, w.layer, kind, w.bytes));
    }
    TANDEM_RETURN_IF_ERROR(check_source(source, w, bi));
    std::byte* dst = pool.page_bytes_for_write(w.page, bi);
    if (dst == nullptr) {
        return make_error(error_code::out_of_range,
                          fmt::format("PAGE_SPAN of request {} to page {} epoch {} rejected: "
                                      "the page is not current (stale epoch, freed, sealed or "
                                      "quarantined)", w.request_id, w.page.page, w.page.epoch));
    }
    if (status copied = pool.copy_from(dst, *source, source->arena() + w.src_offset, w.bytes); !copied)
        return copied.with_context(fmt::format("PAGE_SPAN of request {} layer {} {}", w.request_id, w.layer, kind));
    return check_landed(pool, dst, w.bytes, w.checksum, "PAGE_SPAN", w.request_id, w.layer, kind);
}

status apply_page_buffer(cache::page_pool& pool, transport::buffer_channel& ch, transport::peer_id peer,
                         int64_t flush_timeout_ms, const page_buffer_msg& w) {
    const cache::layout_spec& l = pool.layout();
    const int32_t bi = l.buffer_index(w.layer, w.kind);
    const char* kind = cache::buffer_kind_name(w.kind);
    std::byte* dst = bi < 0 || w.bytes > l.buffers()[bi].bytes_per_page ? nullptr : pool.page_bytes_for_write(w.page, bi);
    // Whatever we decide, the peer's buffer is received (into scratch when refused): the order is the contract.
    TANDEM_RETURN_IF_ERROR(dst ? ch.recv_buffer(peer, dst, w.bytes) : ch.discard_buffer(peer, w.bytes));
    if (status flushed = ch.flush(peer, flush_timeout_ms); !flushed)
        return flushed.with_context(fmt::format("PAGE_BUFFER of request {} layer {} {}", w.request_id, w.layer, kind));
    if (bi < 0 || w.bytes > l.buffers()[bi].bytes_per_page) {
        return make_error(error_code::data_loss,
                          fmt::format("PAGE_BUFFER of request {}: layer {} has no {} buffer of >= {} bytes",
                                      w.request_id, w.layer, kind, w.bytes));
    }
    if (dst == nullptr) {
        return make_error(error_code::out_of_range,
                          fmt::format("PAGE_BUFFER of request {} to page {} epoch {} rejected: the page is not "
                                      "current (stale epoch, freed, sealed or quarantined)",
                                      w.request_id, w.page.page, w.page.epoch));
    }
    result<uint64_t> landed = ch.checksum_device(dst, w.bytes);
    if (!landed) return landed.error().with_context(fmt::format("PAGE_BUFFER of request {}: hashing the landed bytes", w.request_id));
    if (*landed == w.checksum) return status::ok();
    return make_error(error_code::data_loss,
                      fmt::format("PAGE_BUFFER of request {} layer {} {}: checksum mismatch after the bytes "
                                  "landed in the device pool ({} bytes)", w.request_id, w.layer, kind, w.bytes));
}

status apply_state_write(cache::page_pool& pool, const state_write_msg& w) {
    const cache::layout_spec& l = pool.layout();
    const int32_t si = l.state_index(w.layer, w.kind);
    const char* kind = cache::state_kind_name(w.kind);
    if (si < 0 || static_cast<int64_t>(w.data.size()) != l.states()[si].bytes) {
        return make_error(error_code::data_loss,
                          fmt::format("STATE_WRITE of request {}: layer {} has no {} state of {} "
                                      "bytes", w.request_id, w.layer, kind, w.data.size()));
    }
    TANDEM_RETURN_IF_ERROR(verify(w.checksum, w.data, "STATE_WRITE", w.request_id, w.layer, kind));
    std::byte* slot = pool.slot_bytes_for_write(w.slot);
    if (slot == nullptr) {
        return make_error(error_code::out_of_range,
                          fmt::format("STATE_WRITE of request {} to slot {} epoch {} rejected: "
                                      "the slot is not current", w.request_id, w.slot.slot,
                                      w.slot.epoch));
    }
    const cache::pool_geometry& g = pool.geometry();
    return land(pool, slot + (g.state_offset(si, w.slot.slot) - g.slot_offset(w.slot.slot)), w.data,
                w.checksum, "STATE_WRITE", w.request_id, w.layer, kind);
}

// ------------------------------------------------------------------------------------------------

transfer_tracker::transfer_tracker(const cache::page_pool& pool, uint64_t request_id,
                                   std::span<const cache::page_ref> pages, cache::slot_ref slot,
                                   int64_t tokens, int64_t deadline_ms)
    : request_id_(request_id), deadline_ms_(deadline_ms) {
    const cache::layout_spec& l = pool.layout();
    const int64_t n = pages_needed(l, tokens);
    TANDEM_CHECK(static_cast<int64_t>(pages.size()) >= n && slot.valid());
    std::vector<cache::page_move> moves;
    for (int64_t i = 0; i < n; ++i) moves.push_back({pages[i].page, pages[i]});
    plan_ = cache::plan_transfer(pool.geometry(), pool.geometry(), moves, tokens, slot.slot, slot);
    const size_t spans = plan_.spans.size();
    checksums_.assign(spans, 0);
    received_.assign(spans, 0);
    layer_of_span_.assign(spans, 0);
    layer_expected_.assign(plan_.layer_end.size(), 0);
    layer_received_.assign(plan_.layer_end.size(), 0);
    size_t layer = 0;
    for (size_t i = 0; i < spans; ++i) {
        while (static_cast<int32_t>(i) >= plan_.layer_end[layer]) ++layer;
        const cache::transfer_span& s = plan_.spans[i];
        layer_of_span_[i] = static_cast<int32_t>(layer);
        ++layer_expected_[layer];
        const int32_t target = s.kind == cache::span_kind::history ? s.dst_page.page : s.dst_slot.slot;
        span_of_[span_key(s.kind, s.index, target)] = static_cast<int32_t>(i);
    }
}

int64_t transfer_tracker::layers_ready() const {
    int64_t n = 0;
    for (size_t l = 0; l < layer_expected_.size(); ++l) n += layer_ready(l) ? 1 : 0;
    return n;
}

status transfer_tracker::fail(status st) {
    if (failure_.is_ok()) failure_ = st;
    return st;
}

// Is this write one the plan expects, not yet received, naming the table's epoch and size?
status transfer_tracker::accept(cache::span_kind kind, int32_t index, int32_t target,
                                uint64_t request_id, int64_t bytes, int32_t* span_out) {
    auto it = index < 0 ? span_of_.end() : span_of_.find(span_key(kind, index, target));
    if (request_id != request_id_ || it == span_of_.end() || received_[it->second] ||
        plan_.spans[it->second].bytes != bytes) {
        ++stats_.unexpected;
        return fail(make_error(error_code::data_loss,
                               fmt::format("request {}: unexpected or duplicate write to {} {} "
                                           "({} bytes)", request_id_,
                                           kind == cache::span_kind::history ? "page" : "slot",
                                           target, bytes)));
    }
    *span_out = it->second;
    return status::ok();
}

status transfer_tracker::record(int32_t span, uint64_t checksum, status applied) {
    if (!applied.is_ok()) {
        if (applied.code() == error_code::out_of_range) ++stats_.stale_rejected;
        else ++stats_.checksum_failures;
        return fail(applied);
    }
    ++stats_.writes_applied;
    received_[span] = 1;
    checksums_[span] = checksum;
    ++received_total_;
    ++layer_received_[layer_of_span_[span]];
    return status::ok();
}

status transfer_tracker::accept_page(cache::page_pool& pool, cache::page_ref page, int32_t layer,
                                     cache::buffer_kind kind, uint64_t request_id, int64_t bytes,
                                     int32_t* span_out) {
    const int32_t bi = pool.layout().buffer_index(layer, kind);
    TANDEM_RETURN_IF_ERROR(accept(cache::span_kind::history, bi, page.page, request_id, bytes, span_out));
    if (plan_.spans[*span_out].dst_page.epoch != page.epoch) {
        ++stats_.stale_rejected;
        return fail(make_error(error_code::out_of_range,
                               fmt::format("request {}: write to page {} names epoch {}, the "
                                           "table holds epoch {}", request_id_, page.page,
                                           page.epoch, plan_.spans[*span_out].dst_page.epoch)));
    }
    return status::ok();
}

status transfer_tracker::apply(cache::page_pool& pool, const page_write_msg& w) {
    if (failed()) return failure_;
    int32_t span = -1;
    TANDEM_RETURN_IF_ERROR(accept_page(pool, w.page, w.layer, w.kind, w.request_id,
                                       static_cast<int64_t>(w.data.size()), &span));
    return record(span, w.checksum, apply_page_write(pool, w));
}

status transfer_tracker::apply(cache::page_pool& pool, const page_span_msg& w, const cache::page_pool* source) {
    if (failed()) return failure_;
    int32_t span = -1;
    TANDEM_RETURN_IF_ERROR(accept_page(pool, w.page, w.layer, w.kind, w.request_id, w.bytes, &span));
    TANDEM_RETURN_IF_ERROR(record(span, w.checksum, apply_page_span(pool, source, w)));
    ++stats_.spans_copied;
    return status::ok();
}

status transfer_tracker::apply(cache::page_pool& pool, const page_buffer_msg& w, transport::buffer_channel& ch,
                               transport::peer_id peer, int64_t flush_timeout_ms, bool* consumed) {
    *consumed = false;
    if (failed()) return failure_;
    int32_t span = -1;
    TANDEM_RETURN_IF_ERROR(accept_page(pool, w.page, w.layer, w.kind, w.request_id, w.bytes, &span));
    *consumed = true;  // apply_page_buffer posts exactly one receive or discard
    TANDEM_RETURN_IF_ERROR(record(span, w.checksum, apply_page_buffer(pool, ch, peer, flush_timeout_ms, w)));
    ++stats_.spans_copied;
    return status::ok();
}

status transfer_tracker::apply(cache::page_pool& pool, const state_write_msg& w) {
    if (failed()) return failure_;
    const int32_t si = pool.layout().state_index(w.layer, w.kind);
    int32_t span = -1;
    TANDEM_RETURN_IF_ERROR(accept(cache::span_kind::state, si, w.slot.slot, w.request_id,
                                  static_cast<int64_t>(w.data.size()), &span));
    return record(span, w.checksum, apply_state_write(pool, w));
}

status transfer_tracker::finish(const prefill_done_msg& done) {
    if (failed()) return failure_;
    if (done.request_id != request_id_ || done.writes_sent != plan_.spans.size() ||
        received_total_ != expected_writes()) {
        return fail(make_error(error_code::data_loss,
                               fmt::format("request {}: prefill sent {} writes, {} expected, {} "
                                           "arrived verified", request_id_, done.writes_sent,
                                           plan_.spans.size(), received_total_)));
    }
    if (transfer_checksum(checksums_) != done.transfer_checksum) {
        ++stats_.checksum_failures;
        return fail(make_error(error_code::data_loss,
                               fmt::format("request {}: whole-transfer checksum mismatch",
                                           request_id_)));
    }
    done_ = true;
    return status::ok();
}

// ------------------------------------------------------------------------------------------------

void abort_book::begin(cache::page_pool& pool, uint64_t request_id, cache::slot_ref slot,
                       int64_t lease_deadline_ns) {
    pool.abort_sequence(slot, request_id, lease_deadline_ns);
    pending_[request_id] = lease_deadline_ns;
}

bool abort_book::on_ack(cache::page_pool& pool, uint64_t request_id) {
    if (pending_.erase(request_id) == 0) {
        ++unknown_acks_;
        return false;
    }
    pool.release_quarantine(request_id);
    return true;
}

int64_t abort_book::expire(cache::page_pool& pool, int64_t now_ns) {
    std::erase_if(pending_, [&](const auto& kv) { return kv.second <= now_ns; });
    return pool.expire_leases(now_ns);
}

}  // namespace tandem::topo
