// topo/pd_decode.cpp — Decode side: jobs out, verified state in, aborts quarantined.
#include "topo/pd_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/liveness.h"
#include "core/log.h"
#include "engine/scheduler.h"
#include "topo/pd_convert.h"

namespace tandem::topo {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

abort_cause wire_cause(engine::release_cause c) {
    switch (c) {
        case engine::release_cause::deadline: return abort_cause::deadline;
        case engine::release_cause::shutdown: return abort_cause::shutdown;
        case engine::release_cause::error:
        case engine::release_cause::peer_lost: return abort_cause::error;
        case engine::release_cause::client:
        case engine::release_cause::preempted: break;
    }
    return abort_cause::client;
}

}  // namespace

decode_link::decode_link(std::shared_ptr<engine::pool_sequences> seqs, decode_link_options opt)
    : seqs_(std::move(seqs)), opt_(opt) {}

decode_link::~decode_link() = default;

pd_handlers decode_link::handlers() {
    pd_handlers h;
    h.on_peer_ready = [this](transport::peer_id p, const std::string& name) {
        {
            std::lock_guard lock(mu_);
            ready_[p] = name;
        }
        TANDEM_LOG_INFO("pd: prefill peer {} connected", name);
        wake();
    };
    h.on_peer_lost = [this](transport::peer_id p, const status& why) {
        bool repeated = false;
        {
            std::lock_guard lock(mu_);
            auto it = ready_.find(p);
            std::string loss = it != ready_.end() ? fmt::format("{}: {}", it->second, why.message())
                                                  : why.message();
            repeated = loss == last_loss_;
            last_loss_ = std::move(loss);
            if (it != ready_.end()) ready_.erase(it);
        }
        // A refused peer is retried every reconnect_max_ms: say it once, not every retry.
        if (!repeated) TANDEM_LOG_WARN("pd: prefill peer lost: {}", why.message());
        post({inbound::what::peer_lost, p, {}, why});
    };
    auto message = [this](transport::peer_id p, auto&& m) {
        post({inbound::what::message, p, pd_message(std::move(m)), {}});
    };
    h.on_page_write = message;
    if (opt_.span_source) h.on_page_span = message;
    if (buffers_) h.on_page_buffer = message;
    h.on_state_write = message;
    h.on_done = message;
    h.on_failed = message;
    h.on_abort = message;
    h.on_abort_ack = message;
    return h;
}

void decode_link::attach(transport::transport* t, const pd_endpoint* endpoint, transport::buffer_channel* buffers) {
    transport_ = t;
    endpoint_ = endpoint;
    buffers_ = buffers;
}

void decode_link::set_wake(std::function<void()> wake) {
    std::lock_guard lock(mu_);
    wake_ = std::move(wake);
}

void decode_link::wake() {
    std::lock_guard lock(mu_);  // held while calling: set_wake({}) then means "never again"
    if (wake_) wake_();
}

void decode_link::post(inbound&& in) {
    {
        std::lock_guard lock(mu_);
        inbox_.push_back(std::move(in));
    }
    wake();
}

std::optional<std::string> decode_link::unavailable() const {
    std::lock_guard lock(mu_);
    if (!ready_.empty()) return std::nullopt;
    return last_loss_.empty()
               ? std::string("no prefill peer connected yet (topology.mode = \"pd\")")
               : "no prefill peer connected; the last one was lost: " + last_loss_;
}

std::optional<transport::peer_id> decode_link::pick_peer() const {
    std::vector<transport::peer_id> peers;
    {
        std::lock_guard lock(mu_);
        for (const auto& [p, name] : ready_) peers.push_back(p);
    }
    std::optional<transport::peer_id> best;
    int64_t best_load = 0;
    for (transport::peer_id p : peers) {
        int64_t load = 0;
        for (const auto& [id, t] : transfers_) load += t.peer == p ? 1 : 0;
        if (!best || load < best_load) {
            best = p;
            best_load = load;
        }
    }
    return best;
}

status decode_link::start(const engine::remote_prefill_job& job) {
    TANDEM_CHECK(transport_ != nullptr && endpoint_ != nullptr && job.params != nullptr);
    std::optional<transport::peer_id> peer = pick_peer();
    if (!peer) return make_error(error_code::unavailable, *unavailable());
    const cache::page_pool& pool = seqs_->pool();
    const cache::slot_ref slot = seqs_->slot(job.sequence);
    const int64_t tokens = static_cast<int64_t>(job.prompt.size());
    const int64_t n = (tokens + pool.layout().page_size() - 1) / pool.layout().page_size();
    std::span<const cache::page_ref> table = pool.page_table(slot);
    TANDEM_CHECK(static_cast<int64_t>(table.size()) >= n);

    const uint64_t job_id = next_job_++;
    prefill_job_msg msg;
    msg.request_id = job_id;
    msg.token_ids.assign(job.prompt.begin(), job.prompt.end());
    msg.sampling = to_wire(*job.params, job.seed);
    msg.pages.assign(table.begin(), table.begin() + n);
    msg.slot = slot;
    msg.deadline_ms = opt_.transfer_timeout_ms;
    transfer t;
    t.request = job.id;
    t.peer = *peer;
    t.sequence = job.sequence;
    // The deadline is one of progress (expire()); the tracker's own is never reached.
    t.tracker = std::make_unique<transfer_tracker>(pool, job_id, msg.pages, slot, tokens,
                                                   std::numeric_limits<int64_t>::max());
    t.started_s = engine::monotonic_seconds();
    t.progress_ms = monotonic_ms();
    TANDEM_RETURN_IF_ERROR(endpoint_->send(*transport_, *peer, msg));
    transfers_.emplace(job_id, std::move(t));
    job_of_[job.id] = job_id;
    publish();
    return status::ok();
}

void decode_link::release(engine::request_id id, engine::sequence_id sequence,
                          engine::release_cause cause) {
    auto job = job_of_.find(id);
    auto it = job == job_of_.end() ? transfers_.end() : transfers_.find(job->second);
    const bool writer_gone = it == transfers_.end() || it->second.writer_gone;
    if (it != transfers_.end()) {
        if (!it->second.reported) c_.aborted.fetch_add(1);
        c_.by_cause[static_cast<int>(cause)].fetch_add(1);
    }
    if (writer_gone) {
        seqs_->destroy(sequence);  // nothing can write into it any more
    } else {
        // The prefill engine may still be writing: ABORT, and keep the pages out of reuse until
        // it acknowledges or the lease runs out (invariant 2).
        const uint64_t job_id = it->first;
        const transport::peer_id peer = it->second.peer;
        (void)endpoint_->send(*transport_, peer, abort_msg{job_id, wire_cause(cause)});
        const cache::slot_ref slot = seqs_->detach(sequence);
        aborts_.begin(seqs_->pool(), job_id, slot, now_ns() + opt_.abort_lease_ms * 1'000'000);
        quarantine_peer_[job_id] = peer;
    }
    if (it != transfers_.end()) {
        release_spans(it->first, it->second);
        transfers_.erase(it);
    }
    if (job != job_of_.end()) job_of_.erase(job);
    publish();
}

void decode_link::release_spans(uint64_t id, transfer& t) {
    if ((!opt_.span_source && !buffers_) || t.spans_released) return;
    t.spans_released = true;
    (void)endpoint_->send(*transport_, t.peer, spans_released_msg{id});
}

bool decode_link::busy() const { return !transfers_.empty() || aborts_.size() > 0; }

void decode_link::poll(std::vector<engine::remote_prefill_result>& out) {
    draining_.clear();
    {
        std::lock_guard lock(mu_);
        draining_.swap(inbox_);
    }
    for (inbound& in : draining_) handle(in, out);
    draining_.clear();
    expire(out);
    publish();
}

decode_link::transfer* decode_link::find(uint64_t id, transport::peer_id peer) {
    auto it = transfers_.find(id);
    if (it == transfers_.end() || it->second.writer_gone) {
        c_.late.fetch_add(1);  // aborted or ended: its pages are quarantined or reused; drop
        return nullptr;
    }
    if (it->second.peer != peer) {
        c_.unexpected.fetch_add(1);  // another peer writing into our request: never applied
        return nullptr;
    }
    return &it->second;
}

void decode_link::handle(inbound& in, std::vector<engine::remote_prefill_result>& out) {
    if (in.kind == inbound::what::peer_lost) return on_peer_lost(in.peer, in.why, out);
    cache::page_pool& pool = seqs_->pool();
    if (auto* w = std::get_if<page_write_msg>(&in.msg)) {
        apply_write(in.peer, *w, static_cast<int64_t>(w->data.size()), out);
    } else if (auto* s = std::get_if<state_write_msg>(&in.msg)) {
        apply_write(in.peer, *s, static_cast<int64_t>(s->data.size()), out);
    } else if (auto* sp = std::get_if<page_span_msg>(&in.msg)) {
        apply_write(in.peer, *sp, sp->bytes, out);
    } else if (auto* b = std::get_if<page_buffer_msg>(&in.msg)) {
        apply_buffer(in.peer, *b, out);
    } else if (auto* d = std::get_if<prefill_done_msg>(&in.msg)) {
        on_done(in.peer, *d, out);
    } else if (auto* f = std::get_if<prefill_failed_msg>(&in.msg)) {
        if (transfer* t = find(f->request_id, in.peer)) {
            note_finished(in.peer, f->request_id);
            fail(f->request_id, *t,
                 make_error(error_code::unavailable, "the prefill engine failed the job: " + f->reason),
                 true, out);
        }
    } else if (auto* a = std::get_if<abort_msg>(&in.msg)) {
        if (transfers_.count(a->request_id) == 0) {
            c_.unknown_aborts.fetch_add(1);  // not ours (an ABORT storm) or already ended
        } else if (transfer* t = find(a->request_id, in.peer)) {
            fail(a->request_id, *t,
                 make_error(error_code::unavailable,
                            fmt::format("the prefill engine aborted the job ({})",
                                        abort_cause_name(a->cause))),
                 true, out);
        }
    } else if (auto* ack = std::get_if<abort_ack_msg>(&in.msg)) {
        if (aborts_.on_ack(pool, ack->request_id)) {
            quarantine_peer_.erase(ack->request_id);
            c_.acks.fetch_add(1);
        } else {
            c_.unknown_acks.fetch_add(1);
        }
    }
}

template <typename W>
void decode_link::apply_write(transport::peer_id peer, const W& w, int64_t bytes,
                              std::vector<engine::remote_prefill_result>& out) {
    transfer* t = find(w.request_id, peer);
    if (t == nullptr || t->reported) return;
    cache::page_pool& pool = seqs_->pool();
    c_.bytes.fetch_add(bytes);
    t->progress_ms = monotonic_ms();
    const receive_stats before = t->tracker->stats();
    status st;
    if constexpr (std::is_same_v<W, page_span_msg>) {
        st = t->tracker->apply(pool, w, &opt_.span_source->pool());
        if (st.is_ok()) c_.spans.fetch_add(1), c_.span_bytes.fetch_add(bytes);
    } else {
        st = t->tracker->apply(pool, w);
    }
    if (st.is_ok() && opt_.corrupt_landed) corrupt_landed(pool, *opt_.corrupt_landed, w);
    on_write_result(w.request_id, *t, before, st, out);
}

// Every PAGE_BUFFER gets exactly one receive or discard on its peer's channel, applied or not:
// the channel matches buffers by order, so skipping one would land every later buffer wrongly.
void decode_link::apply_buffer(transport::peer_id peer, const page_buffer_msg& w,
                               std::vector<engine::remote_prefill_result>& out) {
    bool consumed = false;
    transfer* t = find(w.request_id, peer);
    if (t != nullptr && !t->reported) {
        cache::page_pool& pool = seqs_->pool();
        c_.bytes.fetch_add(w.bytes);
        t->progress_ms = monotonic_ms();
        const receive_stats before = t->tracker->stats();
        const status st = t->tracker->apply(pool, w, *buffers_, peer, opt_.transfer_timeout_ms, &consumed);
        if (st.is_ok()) c_.spans.fetch_add(1), c_.span_bytes.fetch_add(w.bytes);
        on_write_result(w.request_id, *t, before, st, out);
    }
    if (!consumed && buffers_->discard_buffer(peer, w.bytes).is_ok()) {
        (void)buffers_->flush(peer, opt_.transfer_timeout_ms);  // a broken channel fails the next write
    }
}

void decode_link::on_write_result(uint64_t id, transfer& t, const receive_stats& before,
                                  const status& st,
                                  std::vector<engine::remote_prefill_result>& out) {
    count_rejections(before, t.tracker->stats());
    if (!st.is_ok()) fail(id, t, st, false, out);
}

// What the tracker rejected since `before` (it classifies; we only count).
void decode_link::count_rejections(const receive_stats& before, const receive_stats& after) {
    c_.checksum.fetch_add(after.checksum_failures - before.checksum_failures);
    c_.stale.fetch_add(after.stale_rejected - before.stale_rejected);
    c_.unexpected.fetch_add(after.unexpected - before.unexpected);
}

void decode_link::on_done(transport::peer_id peer, prefill_done_msg& done,
                          std::vector<engine::remote_prefill_result>& out) {
    transfer* t = find(done.request_id, peer);
    if (t == nullptr || t->reported) return;
    t->writer_gone = true;  // every write precedes PREFILL_DONE on the link
    release_spans(done.request_id, *t);  // ... so every span was copied (or refused) by now
    const receive_stats before = t->tracker->stats();
    if (status st = t->tracker->finish(done); !st.is_ok()) {
        count_rejections(before, t->tracker->stats());
        return fail(done.request_id, *t, st, true, out);
    }
    engine::remote_prefill_result r;
    r.id = t->request;
    r.first_token = done.first_token;
    r.first_logprobs = from_wire(scored_position{done.first_token, done.first_logprob, done.top_logprobs});
    for (const scored_position& p : done.prompt_logprobs) r.prompt_logprobs.push_back(from_wire(p));
    note_finished(peer, done.request_id);
    transfer_seconds_.observe(engine::monotonic_seconds() - t->started_s);
    c_.ok.fetch_add(1);
    out.push_back(std::move(r));
    job_of_.erase(t->request);
    transfers_.erase(done.request_id);  // the sequence is the scheduler's again
}

void decode_link::fail(uint64_t id, transfer& t, status why, bool writer_gone,
                       std::vector<engine::remote_prefill_result>& out, engine::release_cause cause) {
    t.writer_gone = t.writer_gone || writer_gone;
    if (t.reported) return;
    t.reported = true;
    release_spans(id, t);  // a reported transfer applies no further write
    c_.failed.fetch_add(1);
    TANDEM_LOG_WARN("pd: transfer of request {} (job {}) failed: {}", t.request, id, why.message());
    engine::remote_prefill_result r;
    r.id = t.request;
    r.error = std::move(why);
    r.cause = cause;
    out.push_back(std::move(r));
}

void decode_link::on_peer_lost(transport::peer_id peer, const status& why,
                               std::vector<engine::remote_prefill_result>& out) {
    for (auto& [id, t] : transfers_) {
        if (t.peer != peer) continue;
        fail(id, t, make_error(error_code::unavailable, "prefill peer lost: " + why.message()),
             true, out, engine::release_cause::peer_lost);
    }
    last_finished_.erase(peer);
    // Its link is closed: no write of an aborted request can arrive any more.
    cache::page_pool& pool = seqs_->pool();
    for (auto it = quarantine_peer_.begin(); it != quarantine_peer_.end();) {
        if (it->second == peer) {
            aborts_.on_ack(pool, it->first);
            it = quarantine_peer_.erase(it);
        } else {
            ++it;
        }
    }
}

void decode_link::note_finished(transport::peer_id peer, uint64_t job) {
    finished_job& f = last_finished_[peer];
    if (job >= f.job) f = {job, monotonic_ms()};
}

// Fair deadlines (invariant 12): a transfer fails when IT made no progress for
// transfer_timeout_ms AND neither did the queue it waits in. A prefill engine works on a link's
// jobs oldest first, so a job sent while earlier ones are still in flight waits behind them: any
// write to, or finish of, an earlier job on the same peer is progress of that queue and restarts
// its clock. A job starved while LATER ones progress is not waiting behind anyone: its clock
// runs. A link where nothing moves fails every job on it after the timeout, as before.
void decode_link::expire(std::vector<engine::remote_prefill_result>& out) {
    const int64_t now = monotonic_ms();
    std::vector<std::pair<uint64_t, transfer*>> by_job;
    by_job.reserve(transfers_.size());
    for (auto& [id, t] : transfers_) by_job.emplace_back(id, &t);
    std::sort(by_job.begin(), by_job.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::unordered_map<transport::peer_id, int64_t> ahead_ms;  // newest progress of earlier jobs
    for (auto& [id, t] : by_job) {
        int64_t& ahead = ahead_ms.try_emplace(t->peer, 0).first->second;
        if (auto f = last_finished_.find(t->peer); f != last_finished_.end() && f->second.job < id) {
            ahead = std::max(ahead, f->second.at_ms);
        }
        const int64_t progress = std::max(t->progress_ms, ahead);
        ahead = std::max(ahead, t->progress_ms);
        if (t->reported || now - progress < opt_.transfer_timeout_ms) continue;
        fail(id, *t,
             make_error(error_code::deadline_exceeded,
                        fmt::format("the prefill transfer made no progress for "
                                    "transport.transfer_timeout_ms = {}, nor did any job ahead "
                                    "of it on that prefill ({} of {} layers landed)",
                                    opt_.transfer_timeout_ms, t->tracker->layers_ready(),
                                    seqs_->pool().layout().layers().size())),
             false, out, engine::release_cause::deadline);
    }
    if (aborts_.size() > 0) {
        const size_t before = aborts_.size();
        (void)aborts_.expire(seqs_->pool(), now_ns());
        c_.leases.fetch_add(static_cast<int64_t>(before - aborts_.size()));  // requests, not pages
        for (auto it = quarantine_peer_.begin(); it != quarantine_peer_.end();) {
            it = aborts_.pending(it->first) ? std::next(it) : quarantine_peer_.erase(it);
        }
    }
}

void decode_link::publish() {
    c_.in_flight.store(static_cast<int64_t>(transfers_.size()));
    c_.quarantined.store(static_cast<int64_t>(aborts_.size()));
}

pd_decode_metrics decode_link::metrics() const {
    pd_decode_metrics m;
    m.transfers_ok = c_.ok.load();
    m.transfers_failed = c_.failed.load();
    m.transfers_aborted = c_.aborted.load();
    m.bytes_received = c_.bytes.load();
    m.spans_copied = c_.spans.load();
    m.bytes_copied = c_.span_bytes.load();
    m.checksum_failures = c_.checksum.load();
    m.stale_writes_rejected = c_.stale.load();
    m.unexpected_writes = c_.unexpected.load();
    m.late_writes = c_.late.load();
    m.aborts_client = c_.by_cause[static_cast<int>(engine::release_cause::client)].load();
    m.aborts_deadline = c_.by_cause[static_cast<int>(engine::release_cause::deadline)].load();
    m.aborts_shutdown = c_.by_cause[static_cast<int>(engine::release_cause::shutdown)].load();
    m.aborts_error = c_.by_cause[static_cast<int>(engine::release_cause::error)].load();
    m.aborts_preempted = c_.by_cause[static_cast<int>(engine::release_cause::preempted)].load();
    m.aborts_peer_lost = c_.by_cause[static_cast<int>(engine::release_cause::peer_lost)].load();
    m.abort_acks = c_.acks.load();
    m.unknown_acks = c_.unknown_acks.load();
    m.unknown_aborts = c_.unknown_aborts.load();
    m.leases_expired = c_.leases.load();
    {
        std::lock_guard lock(mu_);
        m.peers_ready = static_cast<int64_t>(ready_.size());
    }
    m.in_flight = c_.in_flight.load();
    m.quarantined = c_.quarantined.load();
    m.transfer_seconds = transfer_seconds_.snapshot();
    return m;
}

}  // namespace tandem::topo
