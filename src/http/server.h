// http/server.h — The HTTP/1.1 front door: one libuv loop thread owns every socket.
//
// Requests are parsed by llhttp, one at a time per connection (a pipelined request waits, with
// the socket's reading paused, until the previous response is complete), so responses always
// leave in request order. Handlers run on the loop thread and must not block: they answer at
// once or keep the `responder` and answer later from any thread. Limits (connections, header and
// body size, request and idle timeouts) are enforced here, before any handler sees a request.
//
// Callers must not depend on libuv: the loop is private to this module.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/http_message.h"

namespace tandem::http {

struct server_limits {
    int64_t max_connections = 1024;
    int64_t max_header_bytes = 65536;
    int64_t max_body_bytes = 16 << 20;
    int64_t request_timeout_ms = 30000;
    int64_t idle_timeout_ms = 75000;
    int64_t shutdown_grace_ms = 10000;
    bool access_log = false;
};

class exchange;  // one request's response state, shared by the loop and the handler

// The handler's handle on a response. Every method may be called from any thread; effects reach
// the socket in call order. After the client disconnects they are silently dropped.
class responder {
public:
    responder() = default;
    explicit responder(std::shared_ptr<exchange> ex) : ex_(std::move(ex)) {}

    void send(response r) const;
    void start_stream(int status, header_list headers,
                      std::string content_type = "text/event-stream") const;
    void write(std::string chunk) const;
    void end_stream() const;

    // True once the client has gone or the server has given up on the request.
    bool cancelled() const;
    // Runs once, on the loop thread, if the client goes away before the response completed.
    void on_cancel(std::function<void()> callback) const;
    const std::string& request_id() const;

private:
    std::shared_ptr<exchange> ex_;
};

using handler = std::function<void(const request&, responder)>;

struct server_stats {
    std::atomic<int64_t> connections_open{0};
    std::atomic<int64_t> connections_total{0};
    std::atomic<int64_t> connections_rejected{0};
    std::atomic<int64_t> requests_total{0};
    std::atomic<int64_t> requests_in_flight{0};
    std::atomic<int64_t> bad_requests{0};  // parse errors, limits, timeouts
};

class server {
public:
    server(server_limits limits, handler on_request);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Binds and listens; returns the bound port (useful with port 0).
    result<int> listen(const std::string& host, int port);
    // Runs the loop on the calling thread until shutdown completes.
    void run();
    // Thread-safe: stop accepting, let in-flight
    // requests finish within the grace period, fail the rest with 503, then return from run().
    void shutdown();
    // Runs `fn` on the loop thread (thread-safe). Dropped after the loop ended.
    void post(std::function<void()> fn);

    bool stopping() const;
    const server_stats& stats() const;

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

}  // namespace tandem::http
