// transport/tcp_impl.h — Loop-side state of the tcp transport (internal to transport/).
//
// Ownership: tcp_impl owns the loop, listener, async and tick handles and every link. A link is
// freed only in its close callback; after close_link() nothing touches it but that callback.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "transport/handshake.h"
#include "transport/tcp.h"

namespace tandem::transport {

struct tcp_impl;

struct tcp_link {
    uv_tcp_t tcp{};  // tcp.data = this
    tcp_impl* owner = nullptr;
    peer_id id = 0;
    int remote = -1;  // index into remotes for links we dialled; -1 for accepted ones
    std::string name;
    frame_reader reader;
    std::optional<handshake_state> hs;
    bool connected = false;  // the socket is up (dialled links start false)
    bool ready = false;
    bool closing = false;
    bool stalled_once = false;
    int64_t stall_until_ms = 0;  // > 0 while stalled by fault injection
    int64_t frames_seen = 0;     // in + out, for drop_after_frames (heartbeats not counted)
    int64_t last_answer_ms = 0;  // ready links: when the peer last answered a PING (or got ready)
    int64_t next_ping_ms = 0;
    std::deque<std::pair<int64_t, std::vector<std::byte>>> delayed;  // (due ms, frame bytes)
    std::vector<char> read_buf;
};

struct tcp_remote {
    std::string address;  // "host:port" as configured
    sockaddr_storage addr{};
    peer_id id = 0;
    tcp_link* link = nullptr;  // the current attempt or connection
    int64_t backoff_ms = 0;
    int64_t next_attempt_ms = 0;
};

struct tcp_impl final : tcp_transport {
    explicit tcp_impl(tcp_options o);
    ~tcp_impl() override { stop(); }

    // transport
    status start(transport_events events) override;
    void stop() override;
    status send(peer_id peer, frame f) override;
    std::vector<peer_id> ready_peers() const override;
    peer_stats stats(peer_id peer) const override;
    peer_stats total_stats() const override;
    int bound_port() const override { return port_; }

    status init();  // create(): resolve peers, init the loop, bind the listener

    // Loop thread only.
    void run_loop();
    void on_tick();
    void drain_inbox();
    void begin_link(tcp_link* l);
    void dial(tcp_remote& r, int64_t now);
    void accept_one();
    void start_reading(tcp_link* l);
    void on_read(tcp_link* l, ssize_t n, const char* data);
    void pump_frames(tcp_link* l);
    void handle_frame(tcp_link* l, frame&& f);
    void send_on(tcp_link* l, std::vector<std::byte> bytes, bool protocol);
    void write_now(tcp_link* l, std::vector<std::byte> bytes, bool counted = true);
    void check_heartbeat(tcp_link* l, int64_t now);
    void count_frame(tcp_link* l);
    void maybe_stall(tcp_link* l, int64_t now);
    void close_link(tcp_link* l, const status& why);
    void shut_down();
    template <typename F> void with_stats(peer_id id, F&& f) {
        std::lock_guard lock(stats_mu_);
        f(stats_[id]);
    }

    tcp_options opt_;
    transport_events events_;
    uv_loop_t loop_{};
    uv_tcp_t listener_{};
    uv_async_t wakeup_{};
    uv_timer_t tick_{};
    bool listening_ = false;
    bool loop_ready_ = false;
    int port_ = 0;
    std::thread thread_;
    std::vector<tcp_remote> remotes_;
    std::map<peer_id, tcp_link*> links_;  // every open link by id (loop thread only)
    peer_id next_accepted_id_ = 0;
    std::mt19937_64 rng_;
    uint64_t storm_count_ = 0;
    bool stopping_loop_ = false;  // loop thread: shutting down, no events any more
    int64_t last_tick_ms_ = 0;    // loop thread: to tell our own pauses from silent peers

    // Shared with caller threads.
    std::mutex inbox_mu_;
    std::vector<std::pair<peer_id, std::vector<std::byte>>> inbox_;
    bool stop_requested_ = false;
    bool async_open_ = false;
    log_limiter drop_log_{1000};  // dropped frames, every link together: one line a second
    mutable std::mutex stats_mu_;
    std::map<peer_id, peer_stats> stats_;
    std::set<peer_id> ready_;
};

}  // namespace tandem::transport
