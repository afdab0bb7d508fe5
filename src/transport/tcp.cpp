// transport/tcp.cpp — The tcp transport's lifecycle: setup, the loop thread, the caller-facing
// API, the periodic tick (deadlines, stalls, delayed frames, reconnects) and shutdown.
#include <netdb.h>

#include <csignal>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "transport/tcp_impl.h"

namespace tandem::transport {

namespace {

constexpr uint64_t k_tick_ms = 5;  // granularity of deadlines, stalls, delays and retries
constexpr peer_id k_first_accepted_id = 1u << 20;

// "host:port" → a socket address; the error names the entry so a config typo is obvious.
result<sockaddr_storage> resolve(const std::string& host_port, const char* what) {
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{} '{}': expected host:port", what, host_port));
    }
    std::string host = host_port.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const std::string port = host_port.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{} '{}': {}", what, host_port, gai_strerror(rc)));
    }
    sockaddr_storage out{};
    std::memcpy(&out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return out;
}

}  // namespace

fault_options fault_options_from_config(const transport_section& t,
                                        std::function<frame(uint64_t n)> storm_frame) {
    fault_options f;
    f.delay_ms = t.fault_delay_ms;
    f.stall_ms = t.fault_stall_ms;
    f.stall_after_frames = t.fault_stall_after_frames;
    f.drop_after_frames = t.fault_drop_after_frames;
    f.corrupt_probability = t.fault_corrupt_probability;
    f.abort_storm = t.fault_abort_storm;
    f.storm_frame = std::move(storm_frame);
    f.seed = static_cast<uint64_t>(t.fault_seed);
    return f;
}

tcp_options tcp_options_from_config(const transport_section& t, bool is_prefill,
                                    handshake_options handshake,
                                    std::function<frame(uint64_t n)> storm_frame) {
    // Zero limits mean an unloaded section; the schema's ranges rule them out for loaded ones.
    TANDEM_CHECK(t.reconnect_min_ms >= 1 && t.reconnect_max_ms >= t.reconnect_min_ms);
    TANDEM_CHECK(t.max_frame_bytes >= 4096);
    TANDEM_CHECK(t.heartbeat_interval_ms >= 1 && t.peer_timeout_ms > t.heartbeat_interval_ms);
    tcp_options o;
    o.name = is_prefill ? "prefill transport" : "decode transport";
    if (is_prefill) {
        o.listen_host = t.listen_host;
        o.listen_port = t.listen_port;
    } else {
        o.peers = t.peers;
    }
    o.handshake = std::move(handshake);
    o.handshake.timeout_ms = t.handshake_timeout_ms;
    o.reconnect_min_ms = t.reconnect_min_ms;
    o.reconnect_max_ms = t.reconnect_max_ms;
    o.max_payload = t.max_frame_bytes;
    o.heartbeat_interval_ms = t.heartbeat_interval_ms;
    o.peer_timeout_ms = t.peer_timeout_ms;
    o.faults = fault_options_from_config(t, std::move(storm_frame));
    return o;
}

result<std::unique_ptr<tcp_transport>> tcp_transport::create(tcp_options opt) {
    auto t = std::make_unique<tcp_impl>(std::move(opt));
    TANDEM_RETURN_IF_ERROR(t->init());
    return std::unique_ptr<tcp_transport>(std::move(t));
}

tcp_impl::tcp_impl(tcp_options o) : opt_(std::move(o)), rng_(opt_.faults.seed) {}

status tcp_impl::init() {
    for (size_t i = 0; i < opt_.peers.size(); ++i) {
        auto addr = resolve(opt_.peers[i], "transport.peers entry");
        if (!addr) return addr.error();
        tcp_remote r;
        r.address = opt_.peers[i];
        r.addr = *addr;
        r.id = static_cast<peer_id>(i + 1);
        r.backoff_ms = opt_.reconnect_min_ms;
        remotes_.push_back(r);
    }
    next_accepted_id_ = k_first_accepted_id;
    if (uv_loop_init(&loop_) != 0) return make_error(error_code::io_error, "tcp: uv_loop_init failed");
    loop_ready_ = true;
    uv_tcp_init(&loop_, &listener_);
    listener_.data = this;
    listening_ = true;
    if (opt_.listen_host.empty()) return status::ok();
    const std::string where = fmt::format("{}:{}", opt_.listen_host, opt_.listen_port);
    auto addr = resolve(where, "transport.listen address");
    if (!addr) return addr.error();
    int rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&*addr), 0);
    if (rc == 0) {
        rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 64, [](uv_stream_t* s, int st) {
            if (st == 0) static_cast<tcp_impl*>(s->data)->accept_one();
        });
    }
    if (rc != 0) {
        return make_error(error_code::io_error,
                          fmt::format("tcp transport cannot listen on {}: {}", where, uv_strerror(rc)));
    }
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return status::ok();
}

status tcp_impl::start(transport_events events) {
    if (thread_.joinable() || !loop_ready_) return make_error(error_code::internal, "tcp: bad start");
    // libuv writes with write(2): a peer that vanished mid-write raises SIGPIPE, whose default
    // action kills the process. The HTTP server ignores it too, but the transport must not depend
    // on having been started after it (a unit-test shard of transports alone died of it).
    std::signal(SIGPIPE, SIG_IGN);
    events_ = std::move(events);
    uv_async_init(&loop_, &wakeup_, [](uv_async_t* a) { static_cast<tcp_impl*>(a->data)->drain_inbox(); });
    wakeup_.data = this;
    uv_timer_init(&loop_, &tick_);
    tick_.data = this;
    uv_timer_start(&tick_, [](uv_timer_t* t) { static_cast<tcp_impl*>(t->data)->on_tick(); },
                   0, k_tick_ms);
    {
        std::lock_guard lock(inbox_mu_);
        async_open_ = true;
    }
    thread_ = std::thread([this] { run_loop(); });
    return status::ok();
}

void tcp_impl::run_loop() {
    uv_run(&loop_, UV_RUN_DEFAULT);
    // The loop only returns once every handle closed, which only shut_down() does; anything else
    // is a bug we must make visible rather than leave peers waiting on a dead thread.
    if (opt_.beat) {
        opt_.beat->mark_dead(stopping_loop_ ? opt_.name + " transport stopped"
                                            : opt_.name + " transport loop exited unexpectedly");
    }
}

void tcp_impl::stop() {
    {
        std::lock_guard lock(inbox_mu_);
        if (!async_open_) {
            stop_requested_ = true;
        } else {
            stop_requested_ = true;
            uv_async_send(&wakeup_);
        }
    }
    if (thread_.joinable()) thread_.join();
    if (loop_ready_) {
        if (!thread_.joinable() && !stopping_loop_) {
            // Never started: close what init() opened and let the loop finish the closes.
            uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
            uv_run(&loop_, UV_RUN_DEFAULT);
        }
        uv_loop_close(&loop_);
        loop_ready_ = false;
    }
}

status tcp_impl::send(peer_id peer, frame f) {
    {
        std::lock_guard lock(stats_mu_);
        if (!ready_.count(peer)) {
            return make_error(error_code::unavailable,
                              fmt::format("{}: peer {} is not connected", opt_.name, peer));
        }
    }
    std::vector<std::byte> bytes;
    encode_frame(f.kind, f.payload, bytes);
    std::lock_guard lock(inbox_mu_);
    if (!async_open_ || stop_requested_) {
        return make_error(error_code::unavailable, opt_.name + ": transport stopped");
    }
    inbox_.emplace_back(peer, std::move(bytes));
    // Work now waits for the loop: if it is wedged, the heartbeat reports it stalled.
    if (opt_.beat) opt_.beat->set_pending(true);
    uv_async_send(&wakeup_);  // coalesces: drain_inbox takes everything queued
    return status::ok();
}

std::vector<peer_id> tcp_impl::ready_peers() const {
    std::lock_guard lock(stats_mu_);
    return {ready_.begin(), ready_.end()};
}

peer_stats tcp_impl::stats(peer_id peer) const {
    std::lock_guard lock(stats_mu_);
    auto it = stats_.find(peer);
    return it == stats_.end() ? peer_stats{} : it->second;
}

peer_stats tcp_impl::total_stats() const {
    std::lock_guard lock(stats_mu_);
    peer_stats t;
    for (const auto& [id, s] : stats_) t += s;
    return t;
}

// ------------------------------------------------------------------------------------------------

void tcp_impl::drain_inbox() {
    std::vector<std::pair<peer_id, std::vector<std::byte>>> batch;
    bool stop = false;
    {
        std::lock_guard lock(inbox_mu_);
        batch.swap(inbox_);
        stop = stop_requested_;
    }
    for (auto& [peer, bytes] : batch) {
        auto it = links_.find(peer);
        if (it == links_.end() || !it->second->ready || it->second->closing) {
            with_stats(peer, [](peer_stats& s) { s.frames_dropped += 1; });
            continue;
        }
        send_on(it->second, std::move(bytes), /*protocol=*/true);
    }
    if (opt_.beat) {
        opt_.beat->beat();
        std::lock_guard lock(inbox_mu_);
        opt_.beat->set_pending(!inbox_.empty());
    }
    if (stop) shut_down();
}

void tcp_impl::on_tick() {
    const int64_t now = monotonic_ms();
    // Timers run before I/O in a loop iteration: after a pause of ours, PONGs may be sitting
    // unread in the socket. The silence was ours, so the peers' clocks restart.
    const bool we_paused = last_tick_ms_ > 0 && now - last_tick_ms_ > opt_.heartbeat_interval_ms;
    last_tick_ms_ = now;
    std::vector<tcp_link*> links;
    for (auto& [id, l] : links_) links.push_back(l);
    for (tcp_link* l : links) {
        if (l->closing) continue;
        if (l->ready) {
            // A link we stopped reading (fault injection) cannot hear PONGs: not the peer's fault.
            if (we_paused || l->stall_until_ms > 0) l->last_answer_ms = now;
            check_heartbeat(l, now);
            if (l->closing) continue;
        }
        if (l->connected && l->hs && l->hs->expired(now)) {
            close_link(l, l->hs->deadline_error(l->name));
            continue;
        }
        if (l->stall_until_ms > 0 && now >= l->stall_until_ms) {
            l->stall_until_ms = 0;
            start_reading(l);
            pump_frames(l);  // frames that arrived before the stall began
            if (l->closing) continue;
        }
        while (!l->closing && !l->delayed.empty() && l->delayed.front().first <= now) {
            auto bytes = std::move(l->delayed.front().second);
            l->delayed.pop_front();
            write_now(l, std::move(bytes));
        }
    }
    for (tcp_remote& r : remotes_) {
        if (r.link == nullptr && now >= r.next_attempt_ms) dial(r, now);
    }
    if (opt_.beat) {
        opt_.beat->beat();
        std::lock_guard lock(inbox_mu_);
        opt_.beat->set_pending(!inbox_.empty());
    }
}

void tcp_impl::dial(tcp_remote& r, int64_t now) {
    auto* l = new tcp_link();
    l->owner = this;
    l->id = r.id;
    l->remote = static_cast<int>(&r - remotes_.data());
    l->name = r.address;
    l->reader = frame_reader(opt_.max_payload);
    uv_tcp_init(&loop_, &l->tcp);
    l->tcp.data = l;
    r.link = l;
    links_[l->id] = l;
    r.next_attempt_ms = now + r.backoff_ms;
    r.backoff_ms = std::min(r.backoff_ms * 2, opt_.reconnect_max_ms);
    auto* req = new uv_connect_t();
    req->data = l;
    const int rc = uv_tcp_connect(req, &l->tcp, reinterpret_cast<const sockaddr*>(&r.addr),
                                  [](uv_connect_t* c, int st) {
        auto* link = static_cast<tcp_link*>(c->data);
        delete c;
        if (link->closing) return;  // cancelled by close_link / shutdown
        if (st != 0) {
            // A refused dial is not a lost peer (it never was one): retry quietly with backoff.
            link->owner->close_link(link, status::ok());
            return;
        }
        link->owner->begin_link(link);
    });
    if (rc != 0) {
        delete req;
        close_link(l, status::ok());
    }
}

void tcp_impl::accept_one() {
    auto* l = new tcp_link();
    l->owner = this;
    l->id = next_accepted_id_++;
    l->reader = frame_reader(opt_.max_payload);
    uv_tcp_init(&loop_, &l->tcp);
    l->tcp.data = l;
    if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_), reinterpret_cast<uv_stream_t*>(&l->tcp)) != 0) {
        uv_close(reinterpret_cast<uv_handle_t*>(&l->tcp), [](uv_handle_t* h) { delete static_cast<tcp_link*>(h->data); });
        return;
    }
    sockaddr_storage peer{};
    int len = sizeof(peer);
    char host[64] = "?";
    if (uv_tcp_getpeername(&l->tcp, reinterpret_cast<sockaddr*>(&peer), &len) == 0) {
        uv_ip_name(reinterpret_cast<sockaddr*>(&peer), host, sizeof(host));
    }
    l->name = fmt::format("{} (peer {})", host, l->id);
    links_[l->id] = l;
    begin_link(l);
}

void tcp_impl::shut_down() {
    if (stopping_loop_) return;
    stopping_loop_ = true;
    std::vector<tcp_link*> links;
    for (auto& [id, l] : links_) links.push_back(l);
    for (tcp_link* l : links) close_link(l, status::ok());
    {
        std::lock_guard lock(inbox_mu_);
        async_open_ = false;
    }
    uv_close(reinterpret_cast<uv_handle_t*>(&wakeup_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    if (listening_) uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
}

}  // namespace tandem::transport
