// The tcp transport over loopback: handshake, several prefill servers per decode side, refusal
// without retry, garbage peers disconnected while the loop survives, and fault injection
// (corruption detected and dropped, dropped links reconnect, stalls trip the handshake deadline).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include <fmt/format.h>

#include "transport/tcp.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::transport;
using namespace tandem::transport::testing;

namespace {

std::unique_ptr<tcp_transport> make_server(const cache::layout_spec& layout, fault_options faults = {},
                                           int64_t handshake_ms = 3000) {
    tcp_options o;
    o.name = "prefill";
    o.listen_host = "127.0.0.1";
    o.handshake = pd_handshake(topo::pd_role::prefill, layout, handshake_ms);
    o.faults = std::move(faults);
    auto t = tcp_transport::create(std::move(o));
    REQUIRE_MESSAGE(t.is_ok(), t.error().message());
    return std::move(*t);
}

std::unique_ptr<tcp_transport> make_client(const cache::layout_spec& layout, std::vector<int> ports,
                                           fault_options faults = {}, int64_t handshake_ms = 3000) {
    tcp_options o;
    o.name = "decode";
    for (int p : ports) o.peers.push_back(fmt::format("127.0.0.1:{}", p));
    o.handshake = pd_handshake(topo::pd_role::decode, layout, handshake_ms);
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 100;
    o.faults = std::move(faults);
    auto t = tcp_transport::create(std::move(o));
    REQUIRE_MESSAGE(t.is_ok(), t.error().message());
    return std::move(*t);
}

// A frame whose content is a function of its sequence number, so a receiver can prove it intact.
frame numbered(uint64_t seq) {
    topo::prefill_failed_msg m;
    m.request_id = seq;
    m.reason = std::string(64 + seq % 200, static_cast<char>('a' + seq % 26));
    return topo::encode_message(m);
}
bool intact(const frame& f) {
    auto m = topo::decode_message(f.kind, f.payload);
    if (!m) return false;
    const auto& p = std::get<topo::prefill_failed_msg>(*m);
    return f.payload == numbered(p.request_id).payload;
}

}  // namespace

TEST_CASE("tcp: one decode side, two prefill servers, frames both ways in order") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log e1, e2, ec;
    auto layout = tiny_layout();
    auto s1 = make_server(layout), s2 = make_server(layout);
    auto beat = std::make_shared<heartbeat>("decode transport");
    tcp_options o;
    o.peers = {fmt::format("127.0.0.1:{}", s1->bound_port()), fmt::format("localhost:{}", s2->bound_port())};
    o.handshake = pd_handshake(topo::pd_role::decode, layout);
    o.beat = beat;
    auto c = tcp_transport::create(std::move(o));
    REQUIRE_MESSAGE(c.is_ok(), c.error().message());
    REQUIRE(s1->start(e1.events()).is_ok());
    REQUIRE(s2->start(e2.events()).is_ok());
    REQUIRE((*c)->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return ec.ready.size() == 2; }));
    CHECK((*c)->ready_peers() == std::vector<peer_id>{1, 2});  // configured peers: index + 1
    REQUIRE(e1.wait([&] { return e1.ready.size() == 1; }));
    for (uint64_t i = 0; i < 50; ++i) {
        REQUIRE((*c)->send(1, numbered(i)).is_ok());
        REQUIRE((*c)->send(2, numbered(1000 + i)).is_ok());
    }
    REQUIRE(e1.wait([&] { return e1.frames.size() == 50; }));
    REQUIRE(e2.wait([&] { return e2.frames.size() == 50; }));
    for (uint64_t i = 0; i < 50; ++i) {
        CHECK(e1.frames[i].second.payload == numbered(i).payload);
        CHECK(e2.frames[i].second.payload == numbered(1000 + i).payload);
    }
    const peer_id back = e1.ready[0];
    REQUIRE(s1->send(back, numbered(7)).is_ok());
    REQUIRE(ec.wait([&] { return ec.frames.size() == 1; }));
    CHECK(ec.frames[0].first == 1);
    CHECK((*c)->stats(1).frames_sent == 52);  // 50 + HELLO + HELLO_ACK
    CHECK(s1->stats(back).frames_received == 50);
    CHECK((*c)->total_stats().connects == 2);
    CHECK_FALSE(beat->problem(monotonic_ms(), 5000).has_value());
    s2->stop();  // a prefill server dies: the decode side is told, the other peer stays
    REQUIRE(ec.wait([&] { return ec.lost.size() == 1; }));
    CHECK(ec.lost[0].first == 2);
    CHECK((*c)->ready_peers() == std::vector<peer_id>{1});
    (*c)->stop();
    CHECK(beat->problem(monotonic_ms(), 5000).has_value());
}

TEST_CASE("tcp: a layout mismatch is refused on both sides and retried only at the slowest rate") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log es, ec;
    auto s = make_server(tiny_layout(cache::index_k_dtype::bf16));
    auto c = make_client(tiny_layout(cache::index_k_dtype::fp8), {s->bound_port()});
    REQUIRE(s->start(es.events()).is_ok());
    REQUIRE(c->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return !ec.lost.empty(); }));
    REQUIRE(es.wait([&] { return !es.lost.empty(); }));
    CHECK(ec.lost_at(0).second.message().find("layout mismatch: prefill has") != std::string::npos);
    CHECK(es.lost_at(0).second.message().find("but prefill has") != std::string::npos);
    // reconnect_min_ms = 10 would give ~50 attempts in 500 ms; a refusal waits reconnect_max_ms
    // (100) each time, so a peer restarted with a matching layout is found, without a storm.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK(es.lost_count() >= 2);
    CHECK(es.lost_count() <= 7);
    CHECK(ec.ready_count() == 0);
}

TEST_CASE("tcp: starting a transport ignores SIGPIPE, so a peer vanishing mid-write cannot kill the process") {
    // The HTTP server ignores SIGPIPE as well; a process (or a test shard) that runs transports
    // without it died of a write to a closed peer. Reset to the default to see the transport set it.
    struct sigaction before {};
    REQUIRE(sigaction(SIGPIPE, nullptr, &before) == 0);
    std::signal(SIGPIPE, SIG_DFL);
    event_log es;
    auto s = make_server(tiny_layout());
    REQUIRE(s->start(es.events()).is_ok());
    struct sigaction now {};
    REQUIRE(sigaction(SIGPIPE, nullptr, &now) == 0);
    const bool ignored = now.sa_handler == SIG_IGN;
    CHECK(ignored);
    s->stop();
    sigaction(SIGPIPE, &before, nullptr);
}

TEST_CASE("tcp: a peer sending garbage is disconnected and counted; the loop keeps serving") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log es;
    event_log ec;
    auto layout = tiny_layout();
    auto s = make_server(layout);
    REQUIRE(s->start(es.events()).is_ok());
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s->bound_port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    REQUIRE(::write(fd, junk, sizeof(junk)) > 0);
    REQUIRE(es.wait([&] { return !es.lost.empty(); }));
    CHECK(es.lost[0].second.code() == error_code::data_loss);
    CHECK(es.lost[0].second.message().find("bad magic") != std::string::npos);
    CHECK(s->total_stats().malformed == 1);
    ::close(fd);
    auto c = make_client(layout, {s->bound_port()});
    REQUIRE(c->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    REQUIRE(c->send(1, numbered(3)).is_ok());
    REQUIRE(es.wait([&] { return es.frames.size() == 1; }));
}

TEST_CASE("tcp faults: corrupted frames are detected and dropped, never delivered") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log es, ec;
    auto layout = tiny_layout();
    auto s = make_server(layout);
    fault_options f;
    f.corrupt_probability = 0.3;
    f.seed = 42;
    auto c = make_client(layout, {s->bound_port()}, f);
    REQUIRE(s->start(es.events()).is_ok());
    REQUIRE(c->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    int sent = 0;
    for (uint64_t i = 0; i < 300; ++i) {
        if (!ec.wait([&] { return c->ready_peers().size() == 1; }, 2000)) break;
        if (c->send(1, numbered(i)).is_ok()) ++sent;
        std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const peer_stats st = s->total_stats();
    std::lock_guard lock(es.mu);
    for (const auto& [peer, fr] : es.frames) CHECK(intact(fr));
    CHECK(st.checksum_failures + st.malformed > 0);
    CHECK(static_cast<int64_t>(es.frames.size()) == st.frames_received);
    CHECK(static_cast<int>(es.frames.size()) < sent);
    CHECK(es.frames.size() > 100);  // most frames survive p = 0.3
    MESSAGE("sent ", sent, ", delivered ", es.frames.size(), ", checksum failures ",
            st.checksum_failures, ", malformed ", st.malformed);
}

TEST_CASE("tcp faults: a dropped connection reconnects") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log es, ec;
    auto layout = tiny_layout();
    auto s = make_server(layout);
    fault_options f;
    f.drop_after_frames = 12;  // HELLO + HELLO_ACK both ways + 8 frames
    auto c = make_client(layout, {s->bound_port()}, f);
    REQUIRE(s->start(es.events()).is_ok());
    REQUIRE(c->start(ec.events()).is_ok());
    uint64_t seq = 0;
    while (ec.ready_count() < 3 && seq < 1000) {
        (void)c->send(1, numbered(seq++));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(ec.ready_count() >= 3);
    CHECK(ec.lost_count() >= 2);
    {
        std::lock_guard lock(ec.mu);
        CHECK(ec.lost[0].second.message().find("fault injection dropped") != std::string::npos);
        for (peer_id p : ec.ready) CHECK(p == 1);  // the same peer id across reconnects
    }
    CHECK(c->stats(1).connects >= 3);
    CHECK(es.frame_count() > 10);
}

TEST_CASE("tcp faults: a stalled reader trips the handshake deadline") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log es, ec;
    auto layout = tiny_layout();
    fault_options f;
    f.stall_ms = 2000;  // the prefill server stops reading from the moment it accepts
    // The decode side's deadline is the shorter one, so it is the one that fires (the server
    // then sees the link close); with equal deadlines either side may notice first.
    auto s = make_server(layout, f, /*handshake_ms=*/1000);
    auto c = make_client(layout, {s->bound_port()}, {}, /*handshake_ms=*/150);
    REQUIRE(s->start(es.events()).is_ok());
    const int64_t t0 = monotonic_ms();
    REQUIRE(c->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return !ec.lost.empty(); }, 3000));
    REQUIRE(es.wait([&] { return !es.lost.empty(); }, 3000));
    CHECK(monotonic_ms() - t0 >= 150);
    CHECK(ec.lost[0].second.code() == error_code::deadline_exceeded);
    CHECK(ec.lost[0].second.message().find("did not finish within 150 ms") != std::string::npos);
    CHECK(ec.ready_count() == 0);
    CHECK(es.ready_count() == 0);
}

TEST_CASE("tcp: a wedged handler shows as a stalled loop; it recovers when released") {
    std::atomic<bool> release{false}, entered{false};
    event_log ec;
    auto layout = tiny_layout();
    auto beat = std::make_shared<heartbeat>("prefill transport");
    tcp_options o;
    o.listen_host = "127.0.0.1";
    o.handshake = pd_handshake(topo::pd_role::prefill, layout);
    o.beat = beat;
    auto s = std::move(tcp_transport::create(std::move(o)).value());
    transport_events se;
    se.on_frame = [&](peer_id, frame&&) {
        entered = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    REQUIRE(s->start(se).is_ok());
    auto c = make_client(layout, {s->bound_port()});
    REQUIRE(c->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    CHECK_FALSE(beat->problem(monotonic_ms(), 50).has_value());
    REQUIRE(c->send(1, numbered(1)).is_ok());
    bool stalled = false;
    for (int i = 0; i < 400 && !stalled; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        stalled = entered && beat->problem(monotonic_ms(), 50).has_value();
    }
    CHECK(stalled);
    release = true;
    bool healthy = false;
    for (int i = 0; i < 400 && !healthy; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        healthy = !beat->problem(monotonic_ms(), 50).has_value();
    }
    CHECK(healthy);
    c->stop();
    s->stop();
}

TEST_CASE("tcp: options from the [transport] section connect a decode side to a prefill side") {
    event_log es, ec;
    auto layout = tiny_layout();
    auto loaded = load_config({});
    REQUIRE(loaded.is_ok());
    transport_section cfg = loaded->transport;
    cfg.listen_host = "127.0.0.1";
    cfg.listen_port = 0;
    cfg.handshake_timeout_ms = 2000;
    auto s = tcp_transport::create(tcp_options_from_config(
        cfg, /*is_prefill=*/true, pd_handshake(topo::pd_role::prefill, layout)));
    REQUIRE(s.is_ok());
    cfg.peers = {fmt::format("127.0.0.1:{}", (*s)->bound_port())};
    tcp_options co = tcp_options_from_config(cfg, false, pd_handshake(topo::pd_role::decode, layout));
    CHECK(co.listen_host.empty());  // the decode role only dials
    CHECK(co.handshake.timeout_ms == 2000);
    auto c = tcp_transport::create(std::move(co));
    REQUIRE(c.is_ok());
    REQUIRE((*s)->start(es.events()).is_ok());
    REQUIRE((*c)->start(ec.events()).is_ok());
    REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    (*c)->stop();
    (*s)->stop();
}

TEST_CASE("tcp: bad addresses are errors naming the entry") {
    tcp_options o;
    o.peers = {"no-port-here"};
    auto t = tcp_transport::create(o);
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.error().message().find("no-port-here") != std::string::npos);
}
