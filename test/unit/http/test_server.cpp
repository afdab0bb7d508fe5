// The HTTP server driven over real sockets on loopback: limits, timeouts, pipelining, streams,
// cross-thread responses, client disconnects and shutdown.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "http/router.h"
#include "http/server.h"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

// A server on an ephemeral port, its loop on its own thread.
struct running_server {
    http::router routes;
    std::unique_ptr<http::server> srv;
    std::thread loop;
    int port = 0;

    explicit running_server(http::server_limits limits = {}) {
        routes.add("GET", "/hello", [](const http::request&, http::responder out) {
            out.send({200, {}, "{\"hello\":true}"});
        });
        routes.add("POST", "/echo", [](const http::request& req, http::responder out) {
            out.send({200, {}, req.body, "text/plain"});
        });
        routes.add("GET", "/later", [](const http::request&, http::responder out) {
            std::thread([out] {  // answered from another thread, after a while
                std::this_thread::sleep_for(50ms);
                out.send({200, {}, "\"late\""});
            }).detach();
        });
        routes.add("GET", "/stream", [](const http::request&, http::responder out) {
            out.start_stream(200, {});
            for (int i = 0; i < 3; ++i) out.write("data: " + std::to_string(i) + "\n\n");
            out.end_stream();
        });
        srv = std::make_unique<http::server>(limits, [this](const http::request& r, http::responder o) {
            routes(r, std::move(o));
        });
        auto bound = srv->listen("127.0.0.1", 0);
        REQUIRE(bound);
        port = *bound;
        loop = std::thread([this] { srv->run(); });
    }
    ~running_server() {
        srv->shutdown();
        loop.join();
    }
};

int connect_to(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
}

void send_all(int fd, const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return;
        off += static_cast<size_t>(n);
    }
}

// Reads until the peer closes, `until` appears `count` times, or the timeout passes.
std::string read_until(int fd, const std::string& until, int count, int timeout_ms = 3000) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto occurrences = [&] {
        int n = 0;
        for (size_t p = got.find(until); p != std::string::npos; p = got.find(until, p + 1)) ++n;
        return n;
    };
    while (std::chrono::steady_clock::now() < deadline && (until.empty() || occurrences() < count)) {
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, 50) <= 0) continue;
        char buf[8192];
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

bool peer_closed(int fd, int timeout_ms = 3000) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, 0) == 0;
}

}  // namespace

TEST_CASE("server: keep-alive serves several requests on one connection") {
    running_server s;
    int fd = connect_to(s.port);
    for (int i = 0; i < 3; ++i) {
        send_all(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        std::string r = read_until(fd, "{\"hello\":true}", 1);
        CHECK(r.starts_with("HTTP/1.1 200 OK"));
    }
    ::close(fd);
}

TEST_CASE("server: pipelined requests are answered in order") {
    running_server s;
    int fd = connect_to(s.port);
    send_all(fd, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
                 "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string r = read_until(fd, "HTTP/1.1 200", 3);
    size_t late = r.find("\"late\""), echo = r.find("first"), hello = r.find("hello");
    REQUIRE(late != std::string::npos);
    REQUIRE(echo != std::string::npos);
    REQUIRE(hello != std::string::npos);
    CHECK(late < echo);  // the slow first response still leaves first
    CHECK(echo < hello);
    ::close(fd);
}

TEST_CASE("server: malformed request → 400 and close; the server keeps serving") {
    running_server s;
    int fd = connect_to(s.port);
    send_all(fd, "GARBAGE\r\n\r\n");
    std::string r = read_until(fd, "", 0, 1000);
    CHECK(r.starts_with("HTTP/1.1 400"));
    CHECK(r.find("\"error\"") != std::string::npos);
    ::close(fd);
    int fd2 = connect_to(s.port);
    send_all(fd2, "GET /hello HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
    CHECK(read_until(fd2, "", 0, 1000).starts_with("HTTP/1.1 400"));
    ::close(fd2);
    int fd3 = connect_to(s.port);
    send_all(fd3, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(read_until(fd3, "hello", 1).starts_with("HTTP/1.1 200"));
    ::close(fd3);
}

TEST_CASE("server: oversized headers and bodies → 413") {
    http::server_limits limits;
    limits.max_header_bytes = 1024;
    limits.max_body_bytes = 100;
    running_server s(limits);
    int fd = connect_to(s.port);
    send_all(fd, "GET /hello HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
    CHECK(read_until(fd, "", 0, 1000).starts_with("HTTP/1.1 413"));
    ::close(fd);
    fd = connect_to(s.port);
    send_all(fd, "POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n");
    CHECK(read_until(fd, "", 0, 1000).starts_with("HTTP/1.1 413"));
    ::close(fd);
    fd = connect_to(s.port);  // a chunked body is counted as it arrives
    send_all(fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" "64\r\n" +
                     std::string(100, 'b') + "\r\n" "5\r\nbbbbb\r\n0\r\n\r\n");
    CHECK(read_until(fd, "", 0, 1000).starts_with("HTTP/1.1 413"));
    ::close(fd);
    fd = connect_to(s.port);  // exactly at the limit is fine
    send_all(fd, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'c'));
    CHECK(read_until(fd, std::string(100, 'c'), 1).starts_with("HTTP/1.1 200"));
    ::close(fd);
}

TEST_CASE("server: a request left hanging → 408; an idle connection is closed") {
    http::server_limits limits;
    limits.request_timeout_ms = 200;
    limits.idle_timeout_ms = 300;
    running_server s(limits);
    int fd = connect_to(s.port);
    send_all(fd, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    CHECK(read_until(fd, "", 0, 2000).starts_with("HTTP/1.1 408"));
    ::close(fd);
    int idle = connect_to(s.port);
    CHECK(peer_closed(idle, 2000));
    ::close(idle);
}

TEST_CASE("server: 404, 405 with Allow") {
    running_server s;
    int fd = connect_to(s.port);
    send_all(fd, "GET /missing HTTP/1.1\r\n\r\nDELETE /hello HTTP/1.1\r\n\r\n");
    std::string r = read_until(fd, "HTTP/1.1", 2);
    CHECK(r.find("HTTP/1.1 404") != std::string::npos);
    CHECK(r.find("HTTP/1.1 405") != std::string::npos);
    CHECK(r.find("Allow: GET") != std::string::npos);
    ::close(fd);
}

TEST_CASE("server: streams use chunked framing and keep the connection") {
    running_server s;
    int fd = connect_to(s.port);
    send_all(fd, "GET /stream HTTP/1.1\r\n\r\n");
    std::string r = read_until(fd, "0\r\n\r\n", 1);
    CHECK(r.find("Transfer-Encoding: chunked") != std::string::npos);
    CHECK(r.find("data: 2\n\n") != std::string::npos);
    send_all(fd, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(read_until(fd, "hello", 1).starts_with("HTTP/1.1 200"));
    ::close(fd);
}

TEST_CASE("server: a client that disconnects cancels its request") {
    std::promise<void> cancelled;
    auto fut = cancelled.get_future();
    http::responder kept;
    running_server s;
    s.routes.add("GET", "/forever", [&](const http::request&, http::responder out) {
        kept = out;
        out.on_cancel([&] { cancelled.set_value(); });
    });
    int fd = connect_to(s.port);
    send_all(fd, "GET /forever HTTP/1.1\r\n\r\n");
    std::this_thread::sleep_for(100ms);
    ::close(fd);
    CHECK(fut.wait_for(2s) == std::future_status::ready);
    CHECK(kept.cancelled());
    kept.send({200, {}, "{}"});  // a late answer to a gone client is harmless
}

TEST_CASE("server: connections beyond max_connections get 503") {
    http::server_limits limits;
    limits.max_connections = 2;
    running_server s(limits);
    int a = connect_to(s.port), b = connect_to(s.port);
    std::this_thread::sleep_for(100ms);
    int c = connect_to(s.port);
    CHECK(read_until(c, "", 0, 1000).starts_with("HTTP/1.1 503"));
    ::close(a);
    ::close(b);
    ::close(c);
}

TEST_CASE("server: shutdown fails a request that does not finish within the grace period") {
    http::server_limits limits;
    limits.shutdown_grace_ms = 200;
    auto s = std::make_unique<running_server>(limits);
    std::atomic<bool> cancelled{false}, routed{false};
    s->routes.add("GET", "/forever", [&](const http::request&, http::responder out) {
        out.on_cancel([&] { cancelled = true; });
        routed = true;
    });
    int fd = connect_to(s->port);
    send_all(fd, "GET /forever HTTP/1.1\r\n\r\n");
    // The shutdown must meet the request in flight: wait until it was routed (a fixed sleep lost
    // that race on a loaded machine and the server shut down before the request arrived).
    for (auto until = std::chrono::steady_clock::now() + 30s;
         !routed && std::chrono::steady_clock::now() < until;) {
        std::this_thread::sleep_for(5ms);
    }
    REQUIRE(routed);
    auto t0 = std::chrono::steady_clock::now();
    s.reset();  // shutdown + join: returns once every connection is closed
    // The request never finishes by itself, so returning at all proves the grace period ended
    // it; the bound only turns a hang into a failure and leaves a loaded machine room (not a
    // verdict on speed: the grace period is 200 ms).
    CHECK(std::chrono::steady_clock::now() - t0 < 60s);
    std::string r = read_until(fd, "", 0, 1000);
    CHECK(r.starts_with("HTTP/1.1 503"));
    CHECK(r.find("shut down") != std::string::npos);
    CHECK(cancelled);
    ::close(fd);
}
