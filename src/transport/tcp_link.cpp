// transport/tcp_link.cpp — One tcp link: reading and reassembling frames, the handshake, writing
// (with fault injection), and closing (with the reconnect decision).
#include <fmt/format.h>

#include "transport/tcp_impl.h"
#include "transport/wire.h"

namespace tandem::transport {

namespace {

constexpr size_t k_read_chunk = 64 * 1024;

struct write_req {
    uv_write_t req{};  // req.data = this
    tcp_link* link = nullptr;
    std::vector<std::byte> data;
};

}  // namespace

void tcp_impl::begin_link(tcp_link* l) {
    l->connected = true;
    uv_tcp_nodelay(&l->tcp, 1);
    l->hs.emplace(opt_.handshake, monotonic_ms());
    write_now(l, encode_frame(handshake_state::hello_frame(opt_.handshake)));
    maybe_stall(l, monotonic_ms());
    if (!l->closing && l->stall_until_ms == 0) start_reading(l);
}

void tcp_impl::start_reading(tcp_link* l) {
    if (l->closing) return;
    uv_read_start(reinterpret_cast<uv_stream_t*>(&l->tcp),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
            auto* link = static_cast<tcp_link*>(h->data);
            link->read_buf.resize(k_read_chunk);
            *buf = uv_buf_init(link->read_buf.data(), static_cast<unsigned>(link->read_buf.size()));
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
            auto* link = static_cast<tcp_link*>(s->data);
            link->owner->on_read(link, n, buf->base);
        });
}

// Feeds bytes to the reassembler and hands out every whole frame. A corrupt payload is dropped
// (the stream is still in sync); an untrustworthy header closes the link (invariant 5).
void tcp_impl::on_read(tcp_link* l, ssize_t n, const char* data) {
    if (l->closing || n == 0) return;
    if (n < 0) {
        close_link(l, make_error(error_code::unavailable,
                                 fmt::format("connection to {} lost: {}", l->name,
                                             uv_strerror(static_cast<int>(n)))));
        return;
    }
    with_stats(l->id, [&](peer_stats& s) { s.bytes_received += n; });
    l->reader.feed(std::span(reinterpret_cast<const std::byte*>(data), static_cast<size_t>(n)));
    pump_frames(l);
}

// Hands out every whole buffered frame unless a stall began (it resumes from the tick).
void tcp_impl::pump_frames(tcp_link* l) {
    // Pending while handing out frames: a handler that blocks leaves it set and unbeaten, so
    // /health sees the wedge; the next tick clears it.
    if (opt_.beat) opt_.beat->set_pending(true);
    frame f;
    while (!l->closing && l->stall_until_ms == 0) {
        const frame_error e = l->reader.next(f);
        if (e == frame_error::need_more) break;
        if (e == frame_error::bad_payload_checksum) {
            with_stats(l->id, [](peer_stats& s) { s.checksum_failures += 1; });
            continue;
        }
        if (frame_error_is_fatal(e)) {
            with_stats(l->id, [](peer_stats& s) { s.malformed += 1; });
            close_link(l, make_error(error_code::data_loss,
                                     fmt::format("{} sent a malformed frame ({}); link closed",
                                                 l->name, frame_error_name(e))));
            return;
        }
        const bool heartbeat = f.kind == control_kind::ping || f.kind == control_kind::pong;
        handle_frame(l, std::move(f));
        if (heartbeat) continue;  // liveness only: fault counters see the same traffic as before
        count_frame(l);
        maybe_stall(l, monotonic_ms());
    }
}

void tcp_impl::handle_frame(tcp_link* l, frame&& f) {
    handshake_state::step s = l->hs->on_frame(f);
    with_stats(l->id, [&](peer_stats& st) {
        if (s.deliver) st.frames_received += 1;
        if (s.dropped) st.frames_dropped += 1;
    });
    if (s.dropped) l->hs->log_dropped(f, l->name, drop_log_, monotonic_ms());
    if (s.answered) l->last_answer_ms = monotonic_ms();
    if (s.reply) write_now(l, encode_frame(*s.reply), !s.heartbeat);
    if (!s.failure.is_ok()) {
        close_link(l, s.failure);
        return;
    }
    if (l->closing) return;  // the reply itself ended the link (fault injection, write error)
    if (s.became_ready) {
        l->ready = true;
        l->last_answer_ms = monotonic_ms();
        l->next_ping_ms = l->last_answer_ms + opt_.heartbeat_interval_ms;
        if (l->remote >= 0) remotes_[l->remote].backoff_ms = opt_.reconnect_min_ms;
        {
            std::lock_guard lock(stats_mu_);
            ready_.insert(l->id);
            stats_[l->id].connects += 1;
        }
        if (events_.on_peer_ready) events_.on_peer_ready(l->id, l->name);
    }
    if (s.deliver && events_.on_frame) events_.on_frame(l->id, std::move(f));
}

// A caller's frame: fault injection may corrupt, delay or multiply it (protocol frames only, so
// the handshake itself stays testable on its own).
void tcp_impl::send_on(tcp_link* l, std::vector<std::byte> bytes, bool protocol) {
    const fault_options& fo = opt_.faults;
    if (protocol && fo.corrupt_probability > 0.0 &&
        std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < fo.corrupt_probability) {
        bytes[rng_() % bytes.size()] ^= static_cast<std::byte>(1 + rng_() % 255);
    }
    if (protocol && fo.delay_ms > 0) {
        l->delayed.emplace_back(monotonic_ms() + fo.delay_ms, std::move(bytes));
    } else {
        write_now(l, std::move(bytes));
    }
    if (protocol && fo.abort_storm > 0 && fo.storm_frame) {
        for (int64_t i = 0; i < fo.abort_storm && !l->closing; ++i) {
            write_now(l, encode_frame(fo.storm_frame(storm_count_++)));
        }
    }
}

void tcp_impl::write_now(tcp_link* l, std::vector<std::byte> bytes, bool counted) {
    if (l->closing) return;
    auto* w = new write_req();
    w->data = std::move(bytes);
    w->link = l;
    w->req.data = w;
    const int64_t n = static_cast<int64_t>(w->data.size());
    uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(w->data.data()), static_cast<unsigned>(n));
    const int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&l->tcp), &buf, 1,
                            [](uv_write_t* req, int st) {
        auto* wr = static_cast<write_req*>(req->data);
        tcp_link* link = wr->link;  // alive: a close cancels writes before its close callback
        delete wr;
        if (st != 0 && !link->closing) {
            link->owner->close_link(link, make_error(error_code::unavailable,
                fmt::format("write to {} failed: {}", link->name, uv_strerror(st))));
        }
    });
    if (rc != 0) {
        delete w;
        close_link(l, make_error(error_code::unavailable,
                                 fmt::format("write to {} failed: {}", l->name, uv_strerror(rc))));
        return;
    }
    with_stats(l->id, [&](peer_stats& s) {
        s.bytes_sent += n;
        s.frames_sent += 1;
    });
    if (counted) count_frame(l);
}

// Called every tick for a ready link: PING when due; a peer silent for peer_timeout_ms is lost.
void tcp_impl::check_heartbeat(tcp_link* l, int64_t now) {
    if (now - l->last_answer_ms >= opt_.peer_timeout_ms) {
        close_link(l, make_error(error_code::unavailable,
                                 fmt::format("{} answered no heartbeat for {} ms "
                                             "(transport.peer_timeout_ms = {}): declared lost",
                                             l->name, now - l->last_answer_ms,
                                             opt_.peer_timeout_ms)));
        return;
    }
    if (now < l->next_ping_ms) return;
    l->next_ping_ms = now + opt_.heartbeat_interval_ms;
    std::vector<std::byte> nonce;
    wire_writer(nonce).u64(static_cast<uint64_t>(now));
    write_now(l, encode_frame(frame{control_kind::ping, std::move(nonce)}), /*counted=*/false);
}

void tcp_impl::count_frame(tcp_link* l) {
    l->frames_seen += 1;
    const int64_t limit = opt_.faults.drop_after_frames;
    if (limit > 0 && l->frames_seen >= limit && !l->closing) {
        close_link(l, make_error(error_code::unavailable,
                                 fmt::format("fault injection dropped the link to {} after {} "
                                             "frames", l->name, limit)));
    }
}

void tcp_impl::maybe_stall(tcp_link* l, int64_t now) {
    const fault_options& fo = opt_.faults;
    if (fo.stall_ms <= 0 || l->stalled_once || l->closing || l->frames_seen < fo.stall_after_frames) return;
    l->stalled_once = true;
    l->stall_until_ms = now + fo.stall_ms;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&l->tcp));
}

// The one place a link ends. `why` ok = a quiet close (shutdown, a failed dial): no event.
void tcp_impl::close_link(tcp_link* l, const status& why) {
    if (l->closing) return;
    l->closing = true;
    const bool was_up = l->connected;
    links_.erase(l->id);
    {
        std::lock_guard lock(stats_mu_);
        ready_.erase(l->id);
        if (was_up) stats_[l->id].disconnects += 1;
    }
    if (l->remote >= 0) {
        tcp_remote& r = remotes_[l->remote];
        r.link = nullptr;
        // A refusal (invalid_argument from the handshake, e.g. a layout mismatch) heals only
        // when an operator restarts the peer with a matching config: retry at the slowest rate.
        if (!why.is_ok() && why.code() == error_code::invalid_argument) {
            r.backoff_ms = opt_.reconnect_max_ms;
        }
        r.next_attempt_ms = std::max(r.next_attempt_ms, monotonic_ms() + r.backoff_ms);
    }
    if (!why.is_ok() && !stopping_loop_ && events_.on_peer_lost) events_.on_peer_lost(l->id, why);
    uv_close(reinterpret_cast<uv_handle_t*>(&l->tcp),
             [](uv_handle_t* h) { delete static_cast<tcp_link*>(h->data); });
}

}  // namespace tandem::transport
