// tcp link liveness: a peer that handshakes and then goes silent (a stopped process, a hung host:
// its socket stays open) is declared lost by heartbeat, on the dialling and on the listening side;
// a peer that answers PINGs stays up past many timeouts; a pause of our own loop is not blamed on
// the peer. The peer is played by hand over a blocking socket, so the test decides exactly when
// it is silent.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "transport/tcp.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::transport;
using namespace tandem::transport::testing;

namespace {

constexpr int64_t k_interval_ms = 50;
constexpr int64_t k_timeout_ms = 400;

// One end of a link, by hand: writes whole frames, reads them with a deadline.
class raw_peer {
  public:
    explicit raw_peer(int fd) : fd_(fd) {}
    ~raw_peer() { ::close(fd_); }

    void send(const frame& f) {
        const std::vector<std::byte> bytes = encode_frame(f);
        size_t off = 0;
        while (off < bytes.size()) {
            const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
            REQUIRE(n > 0);
            off += static_cast<size_t>(n);
        }
    }
    // The next frame within `ms`; false on timeout or a closed link.
    bool next(frame& out, int64_t ms) {
        const int64_t end = monotonic_ms() + ms;
        for (;;) {
            if (reader_.next(out) == frame_error::none) return true;
            const int64_t left = end - monotonic_ms();
            if (left <= 0) return false;
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
            std::byte buf[4096];
            const ssize_t n = ::read(fd_, buf, sizeof(buf));
            if (n <= 0) return false;
            reader_.feed(std::span(buf, static_cast<size_t>(n)));
        }
    }
    // HELLO both ways and HELLO_ACK both ways, as the transport's handshake expects.
    void handshake(const handshake_options& mine) {
        send(frame{control_kind::hello, mine.hello});
        bool got_hello = false, got_ack = false;
        frame f;
        while (!(got_hello && got_ack)) {
            REQUIRE(next(f, 5000));
            if (f.kind == control_kind::hello) {
                got_hello = true;
                send(frame{control_kind::hello_ack, {}});
            }
            got_ack = got_ack || f.kind == control_kind::hello_ack;
        }
    }
    // Reads for `ms`, answering every PING; returns how many came.
    int answer_pings_for(int64_t ms) {
        int pings = 0;
        const int64_t end = monotonic_ms() + ms;
        frame f;
        while (monotonic_ms() < end) {
            if (!next(f, end - monotonic_ms())) continue;
            if (f.kind == control_kind::ping) {
                ++pings;
                send(frame{control_kind::pong, f.payload});
            }
        }
        return pings;
    }

  private:
    int fd_;
    frame_reader reader_;
};

sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

// A listening socket on a free loopback port, for a tcp transport to dial.
struct raw_listener {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int port = 0;
    raw_listener() {
        sockaddr_in a = loopback(0);
        REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
        REQUIRE(::listen(fd, 4) == 0);
        socklen_t len = sizeof(a);
        REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        port = ntohs(a.sin_port);
    }
    ~raw_listener() { ::close(fd); }
    std::unique_ptr<raw_peer> accept_one() {
        pollfd p{fd, POLLIN, 0};
        REQUIRE(::poll(&p, 1, 5000) == 1);
        const int c = ::accept(fd, nullptr, nullptr);
        REQUIRE(c >= 0);
        return std::make_unique<raw_peer>(c);
    }
};

std::unique_ptr<tcp_transport> make_dialler(const cache::layout_spec& layout, int port) {
    tcp_options o;
    o.name = "decode";
    o.peers = {fmt::format("127.0.0.1:{}", port)};
    o.handshake = pd_handshake(topo::pd_role::decode, layout);
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 100;
    o.heartbeat_interval_ms = k_interval_ms;
    o.peer_timeout_ms = k_timeout_ms;
    auto t = tcp_transport::create(std::move(o));
    REQUIRE_MESSAGE(t.is_ok(), t.error().message());
    return std::move(*t);
}

bool is_heartbeat_loss(const status& s) {
    return s.code() == error_code::unavailable &&
           s.message().find("answered no heartbeat") != std::string::npos &&
           s.message().find("transport.peer_timeout_ms = 400") != std::string::npos;
}

}  // namespace

TEST_CASE("tcp heartbeat: a silent prefill peer is declared lost; it is picked up again when it answers") {
    event_log ec;  // declared first: the transport calls into it until stopped
    auto layout = tiny_layout();
    raw_listener listener;
    auto c = make_dialler(layout, listener.port);
    REQUIRE(c->start(ec.events()).is_ok());
    auto silent = listener.accept_one();
    // A lower bound of when the link got ready (its silence clock starts then, on the loop
    // thread, before the test can see the ready event: a clock read after that event could be
    // a few ms late and make an on-time loss look early — it did once in CI, 399 ms).
    const int64_t before_ready = monotonic_ms();
    silent->handshake(pd_handshake(topo::pd_role::prefill, layout));
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    // The peer now neither reads nor writes; its socket stays open.
    REQUIRE(ec.wait([&] { return !ec.lost.empty(); }));
    CHECK(monotonic_ms() - before_ready >= k_timeout_ms);  // never before the timeout
    {
        std::lock_guard lock(ec.mu);
        CHECK_MESSAGE(is_heartbeat_loss(ec.lost[0].second), ec.lost[0].second.message());
    }
    CHECK(c->ready_peers().empty());
    // It answers again (here: a fresh connection, as after SIGCONT the old one is closed).
    auto back = listener.accept_one();
    back->handshake(pd_handshake(topo::pd_role::prefill, layout));
    REQUIRE(ec.wait([&] { return ec.ready.size() == 2; }));
    // Answering, it stays up for several timeouts; the PINGs kept coming.
    const int pings = back->answer_pings_for(3 * k_timeout_ms);
    CHECK(pings >= 2);
    CHECK(ec.lost_count() == 1);
    CHECK(c->ready_peers() == std::vector<peer_id>{1});
    c->stop();
}

TEST_CASE("tcp heartbeat: a silent decode peer is declared lost by the listening side") {
    event_log es;
    auto layout = tiny_layout();
    tcp_options o;
    o.name = "prefill";
    o.listen_host = "127.0.0.1";
    o.handshake = pd_handshake(topo::pd_role::prefill, layout);
    o.heartbeat_interval_ms = k_interval_ms;
    o.peer_timeout_ms = k_timeout_ms;
    auto created = tcp_transport::create(std::move(o));
    REQUIRE(created.is_ok());
    auto s = std::move(*created);
    REQUIRE(s->start(es.events()).is_ok());
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(s->bound_port());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    raw_peer decode(fd);
    decode.handshake(pd_handshake(topo::pd_role::decode, layout));
    REQUIRE(es.wait([&] { return es.ready.size() == 1; }));
    REQUIRE(es.wait([&] { return !es.lost.empty(); }));
    std::lock_guard lock(es.mu);
    CHECK_MESSAGE(is_heartbeat_loss(es.lost[0].second), es.lost[0].second.message());
}

TEST_CASE("tcp heartbeat: a pause of our own loop is not blamed on a peer that answers") {
    event_log ec;
    std::atomic<bool> blocked{false};
    auto layout = tiny_layout();
    raw_listener listener;
    auto c = make_dialler(layout, listener.port);
    transport_events ev = ec.events();
    ev.on_frame = [&](peer_id, frame&&) {  // wedges this side's loop for 3 peer timeouts
        blocked.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(3 * k_timeout_ms));
        blocked.store(false);
    };
    REQUIRE(c->start(std::move(ev)).is_ok());
    auto peer = listener.accept_one();
    peer->handshake(pd_handshake(topo::pd_role::prefill, layout));
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    topo::prefill_failed_msg m{7, "any protocol frame"};
    peer->send(topo::encode_message(m));
    // The peer keeps answering; our loop is the one that stopped. Once it runs again the PONGs
    // waiting in its socket are read, and nothing is declared lost.
    peer->answer_pings_for(5 * k_timeout_ms);
    CHECK_FALSE(blocked.load());
    CHECK(ec.lost_count() == 0);
    CHECK(c->ready_peers() == std::vector<peer_id>{1});
    c->stop();
}
