// http/server_impl.h — The loop-side state of the server (internal to the http module).
//
// Ownership: impl owns the loop, the listener, the mailbox's async handle, the signal and grace
// handles, and every connection (by id). A connection is freed only in its close callbacks.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "http/exchange.h"
#include "http/request_parser.h"
#include "http/server.h"

namespace tandem::http {

struct connection {
    uint64_t id = 0;
    server::impl* srv = nullptr;
    uv_tcp_t tcp{};
    uv_timer_t timer{};
    int open_handles = 0;  // tcp + timer; freed when both are closed
    std::unique_ptr<request_parser> parser;  // made at accept; req() is the request being parsed or answered

    std::string unparsed;          // bytes after a complete message, kept while it is handled
    bool reading = false;
    bool closing = false;
    bool close_after_flush = false;
    bool lingering = false;        // FIN sent; draining the client's bytes until it closes
    int writes_in_flight = 0;
    uint64_t requests_seen = 0;

    // The request being answered.
    std::shared_ptr<exchange> active;
    bool response_started = false;  // head written (streams)
    bool stream_open = false;
    std::chrono::steady_clock::time_point started_at;
    int response_status = 0;
};

struct server::impl {
    server_limits limits;
    handler on_request;
    server_stats stats;

    uv_loop_t loop{};
    uv_tcp_t listener{};
    uv_async_t wakeup{};
    uv_signal_t sigint{}, sigterm{};
    uv_timer_t grace{};
    std::shared_ptr<mailbox> box = std::make_shared<mailbox>();
    std::unordered_map<uint64_t, connection*> connections;
    uint64_t next_connection_id = 1;
    bool listening = false;
    std::atomic<bool> stopping{false};
    bool loop_closed = false;
    bool grace_started = false;

    // server.cpp
    void begin_shutdown();
    void finish_if_drained();
    void force_close_all();
    void dispatch(connection* c);
    void on_exchange_done(connection* c);

    // connection.cpp
    void accept_one();
    void start_reading(connection* c);
    void feed(connection* c, const char* data, size_t len);
    void write_raw(connection* c, std::string data);
    void respond_error(connection* c, int status, std::string_view message, std::string_view type,
                       bool close);
    void close_connection(connection* c);
    void close_after_writes(connection* c);
    void linger_close(connection* c);
    void arm_timer(connection* c);
    void deliver(const std::shared_ptr<exchange>& ex, response r);
    void deliver_stream_start(const std::shared_ptr<exchange>& ex, int status, header_list headers,
                              std::string content_type);
    void deliver_chunk(const std::shared_ptr<exchange>& ex, std::string chunk);
    void deliver_stream_end(const std::shared_ptr<exchange>& ex);
    connection* owner_of(const std::shared_ptr<exchange>& ex);
};


}  // namespace tandem::http
