// topo/pd_prefill.cpp — Prefill side: run the prompt, ship the state, answer aborts.
#include "topo/pd_prefill.h"

#include <fmt/format.h>

#include "core/log.h"
#include "grammar/grammar.h"
#include "topo/pd_convert.h"
#include "topo/pd_transfer.h"

namespace tandem::topo {

prefill_server::prefill_server(engine::scheduler& eng, std::shared_ptr<engine::pool_sequences> seqs,
                               std::string model_dir, std::shared_ptr<span_holds> holds)
    : eng_(eng), seqs_(std::move(seqs)), model_dir_(std::move(model_dir)), holds_(std::move(holds)) {}

result<engine::sampling_params> prefill_server::job_params(const prefill_sampling& s) {
    engine::sampling_params p = from_wire(s);
    if (p.grammar_spec.empty()) return p;
    auto compiler = grammar::compiler_for_model(model_dir_, eng_.vocab_size(), eng_.eos_token_id());
    if (!compiler) return compiler.error();
    auto compiled = (*compiler)->compile(p.grammar_spec);
    if (!compiled) return compiled.error();
    p.grammar = std::move(*compiled);
    return p;
}

pd_handlers prefill_server::handlers() {
    pd_handlers h;
    h.on_peer_ready = [this](transport::peer_id p, const std::string& name) {
        {
            std::lock_guard lock(mu_);
            peers_[p] = name;
        }
        TANDEM_LOG_INFO("pd: decode peer {} connected", name);
    };
    h.on_peer_lost = [this](transport::peer_id p, const status& why) {
        TANDEM_LOG_WARN("pd: decode peer lost: {}", why.message());
        on_peer_lost(p);
    };
    h.on_job = [this](transport::peer_id p, prefill_job_msg&& m) { on_job(p, std::move(m)); };
    h.on_abort = [this](transport::peer_id p, abort_msg&& m) { on_abort(p, m); };
    h.on_abort_ack = [](transport::peer_id, abort_ack_msg&&) {};  // we never send ABORT first
    if (holds_) {
        h.on_spans_released = [this](transport::peer_id p, spans_released_msg&& m) { on_spans_released(p, m); };
    }
    return h;
}

void prefill_server::attach(transport::transport* t, const pd_endpoint* endpoint, transport::buffer_channel* buffers) {
    transport_ = t;
    endpoint_ = endpoint;
    buffers_ = buffers;
}

status prefill_server::send(transport::peer_id peer, const pd_message& m) {
    return endpoint_->send(*transport_, peer, m);
}

void prefill_server::on_job(transport::peer_id peer, prefill_job_msg&& msg) {
    received_.fetch_add(1);
    auto j = std::make_shared<job>();
    j->peer = peer;
    j->msg = std::move(msg);
    const job_key key{peer, j->msg.request_id};
    {
        std::lock_guard lock(mu_);
        if (jobs_.count(key) != 0) {  // a duplicate id from the same peer: refuse the newcomer
            failed_.fetch_add(1);
            (void)send(peer, prefill_failed_msg{key.second, "duplicate request id"});
            return;
        }
        jobs_[key] = j;
    }
    result<engine::sampling_params> params = job_params(j->msg.sampling);
    if (!params) {
        {
            std::lock_guard lock(mu_);
            jobs_.erase(key);
        }
        failed_.fetch_add(1);
        (void)send(peer, prefill_failed_msg{key.second, params.error().message()});
        return;
    }
    engine::submit_request req;
    req.prompt = j->msg.token_ids;
    req.params = std::move(*params);
    req.trace_id = fmt::format("pd-{}", key.second);
    req.sink = [this, j](engine::token_event&& ev) {
        if (ev.finished) on_final(j, std::move(ev));
    };
    result<engine::request_id> id =
        eng_.submit(std::move(req), [this, j](engine::sequence_id seq, int64_t computed, bool done) {
            return ship(*j, seq, computed, done);
        });
    if (!id) {
        {
            std::lock_guard lock(mu_);
            jobs_.erase(key);
        }
        failed_.fetch_add(1);
        (void)send(peer, prefill_failed_msg{key.second, id.error().message()});
        return;
    }
    bool abort_now = false;
    {
        std::lock_guard lock(mu_);
        j->local = *id;
        abort_now = j->abort_requested;  // an ABORT overtook the submit
    }
    if (abort_now) eng_.abort(*id);
}

void prefill_server::on_abort(transport::peer_id peer, const abort_msg& msg) {
    aborts_received_.fetch_add(1);
    engine::request_id local = 0;
    bool known = false;
    {
        std::lock_guard lock(mu_);
        auto it = jobs_.find({peer, msg.request_id});
        if (it != jobs_.end()) {
            known = true;
            it->second->abort_requested = true;
            local = it->second->local;
        }
    }
    if (!known) {
        // Finished or never seen: no write for it can follow any more.
        (void)send(peer, abort_ack_msg{msg.request_id});
        return;
    }
    if (local != 0) eng_.abort(local);  // its final event sends the ACK
}

// The decode side will copy nothing more of this job: its holds go, and a job still computing
// stops shipping (the decode side failed or aborted it; its ABORT, if any, follows).
void prefill_server::on_spans_released(transport::peer_id peer, const spans_released_msg& msg) {
    spans_released_.fetch_add(1);
    {
        std::lock_guard lock(mu_);
        if (auto it = jobs_.find({peer, msg.request_id}); it != jobs_.end()) it->second->spans_released = true;
    }
    holds_->release(peer, msg.request_id);
}

void prefill_server::on_peer_lost(transport::peer_id peer) {
    if (holds_) holds_->release_peer(peer);  // nothing will be copied over a closed link
    std::vector<engine::request_id> locals;
    {
        std::lock_guard lock(mu_);
        peers_.erase(peer);
        for (auto& [key, j] : jobs_) {
            if (key.first != peer) continue;
            j->abort_requested = true;
            if (j->local != 0) locals.push_back(j->local);
        }
    }
    for (engine::request_id id : locals) eng_.abort(id);
}

status prefill_server::ship(job& j, engine::sequence_id seq, int64_t computed, bool done) {
    {
        std::lock_guard lock(mu_);
        if (j.abort_requested) return make_error(error_code::unavailable, "aborted by the decode side");
        if (j.spans_released) return make_error(error_code::unavailable, "the decode side ended the transfer");
    }
    const cache::page_pool& pool = seqs_->pool();
    const cache::slot_ref slot = seqs_->slot(seq);
    std::vector<int64_t> pages;
    for (const cache::page_ref& p : pool.page_table(slot)) pages.push_back(p.page);
    int64_t bytes = 0, named = 0, spans = 0;
    auto emit = [&](pd_message&& m) {
        if (auto* w = std::get_if<page_write_msg>(&m)) bytes += static_cast<int64_t>(w->data.size());
        if (auto* w = std::get_if<state_write_msg>(&m)) bytes += static_cast<int64_t>(w->data.size());
        if (auto* w = std::get_if<page_span_msg>(&m)) named += w->bytes, ++spans;
        if (auto* w = std::get_if<page_buffer_msg>(&m)) named += w->bytes, ++spans;
        return send(j.peer, m);
    };
    if (!j.sender) {
        std::optional<span_naming> naming;
        if (holds_) {
            naming = span_naming{[this, peer = j.peer, id = j.msg.request_id](cache::page_ref p) {
                holds_->hold(peer, id, p);
            }};
            if (buffers_) {
                naming->send_buffer = [this, peer = j.peer](const std::byte* src, int64_t n) {
                    return buffers_->send_buffer(peer, src, n);
                };
            }
        }
        j.sender = std::make_unique<transfer_sender>(j.msg, std::move(naming));
    }
    status st;
    if (!done) {
        st = j.sender->send_complete_pages(pool, pages, slot.slot, computed, emit);
    } else if (result<sent_transfer> sent = j.sender->finish(pool, pages, slot.slot, emit)) {
        j.sent = *sent;
        j.shipped = true;
    } else {
        st = sent.error();
    }
    bytes_.fetch_add(bytes);
    bytes_named_.fetch_add(named);
    spans_named_.fetch_add(spans);
    return st;
}

void prefill_server::on_final(const std::shared_ptr<job>& j, engine::token_event&& ev) {
    bool abort_requested = false;
    {
        std::lock_guard lock(mu_);
        abort_requested = j->abort_requested;
        jobs_.erase({j->peer, j->msg.request_id});
    }
    const uint64_t id = j->msg.request_id;
    if (j->shipped && ev.reason == engine::finish_reason::length && ev.tokens.size() == 1) {
        prefill_done_msg done;
        done.request_id = id;
        done.first_token = ev.tokens[0];
        if (!ev.logprobs.empty()) {
            scored_position first = to_wire(ev.logprobs[0]);
            done.first_logprob = first.logprob;
            done.top_logprobs = std::move(first.top);
        }
        for (const auto& p : ev.prompt_logprobs) done.prompt_logprobs.push_back(to_wire(p));
        done.writes_sent = j->sent.writes;
        done.transfer_checksum = j->sent.checksum;
        ok_.fetch_add(1);
        (void)send(j->peer, done);
    } else if (abort_requested) {
        aborted_.fetch_add(1);
    } else {
        failed_.fetch_add(1);
        std::string why = ev.error.is_ok() ? engine::finish_reason_name(ev.reason) : ev.error.message();
        (void)send(j->peer, prefill_failed_msg{id, why});
    }
    // Every write of this job was sent before this event: none can follow the ACK.
    if (abort_requested) (void)send(j->peer, abort_ack_msg{id});
}

pd_prefill_metrics prefill_server::metrics() const {
    pd_prefill_metrics m;
    m.jobs_received = received_.load();
    m.jobs_ok = ok_.load();
    m.jobs_failed = failed_.load();
    m.jobs_aborted = aborted_.load();
    m.bytes_sent = bytes_.load();
    m.aborts_received = aborts_received_.load();
    m.bytes_named = bytes_named_.load();
    m.spans_named = spans_named_.load();
    m.spans_released = spans_released_.load();
    if (holds_) m.holds = holds_->stats();
    std::lock_guard lock(mu_);
    m.jobs_in_flight = static_cast<int64_t>(jobs_.size());
    m.peers_ready = static_cast<int64_t>(peers_.size());
    return m;
}

}  // namespace tandem::topo
