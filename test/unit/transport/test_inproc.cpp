// The inproc transport: handshake (accept, refuse naming both layouts, deadline), ordered
// delivery both ways on the transport's thread, stats, peer loss, supervision.
#include <doctest/doctest.h>

#include <thread>

#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::transport;
using namespace tandem::transport::testing;

TEST_CASE("inproc: handshake, ordered frames both ways, stats") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log da, pb;
    auto layout = tiny_layout();
    auto pair = make_inproc_pair(pd_handshake(topo::pd_role::decode, layout),
                                 pd_handshake(topo::pd_role::prefill, layout));
    REQUIRE(pair.a->start(da.events()).is_ok());
    REQUIRE(pair.b->start(pb.events()).is_ok());
    REQUIRE(da.wait([&] { return da.ready.size() == 1; }));
    REQUIRE(pb.wait([&] { return pb.ready.size() == 1; }));
    for (uint64_t i = 0; i < 100; ++i) {
        REQUIRE(pair.a->send(1, topo::encode_message(topo::abort_msg{i, topo::abort_cause::client})).is_ok());
        REQUIRE(pair.b->send(1, topo::encode_message(topo::abort_ack_msg{i})).is_ok());
    }
    REQUIRE(pb.wait([&] { return pb.frames.size() == 100; }));
    REQUIRE(da.wait([&] { return da.frames.size() == 100; }));
    for (uint64_t i = 0; i < 100; ++i) {
        auto m = topo::decode_message(pb.frames[i].second.kind, pb.frames[i].second.payload);
        REQUIRE(m.is_ok());
        CHECK(std::get<topo::abort_msg>(*m).request_id == i);
    }
    peer_stats s = pair.a->stats(1);
    CHECK(s.frames_received == 100);
    CHECK(s.frames_sent == 102);  // 100 + HELLO + HELLO_ACK
    CHECK(s.connects == 1);
    CHECK(s.bytes_sent > 0);
    CHECK(pair.a->ready_peers() == std::vector<peer_id>{1});
    // PING is answered by the peer's transport with PONG; neither reaches a handler.
    const int64_t b_sent = pair.b->stats(1).frames_sent;
    REQUIRE(pair.a->send(1, topo::encode_message(topo::ping_msg{5})).is_ok());
    auto pong_seen = [&] { return pair.b->stats(1).frames_sent == b_sent + 1 && pair.a->stats(1).bytes_received > 0; };
    for (int i = 0; i < 500 && !pong_seen(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(pong_seen());
    CHECK(pb.frame_count() == 100);
    CHECK(da.frame_count() == 100);
    pair.b->stop();
    REQUIRE(da.wait([&] { return da.lost.size() == 1; }));
    CHECK(da.lost[0].second.code() == error_code::unavailable);
    CHECK_FALSE(pair.a->send(1, topo::encode_message(topo::ping_msg{1})).is_ok());
}

TEST_CASE("inproc: a layout mismatch is refused on both sides, naming both layouts") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log da, pb;
    auto decode_layout = tiny_layout(cache::index_k_dtype::fp8);
    auto prefill_layout = tiny_layout(cache::index_k_dtype::bf16);
    auto pair = make_inproc_pair(pd_handshake(topo::pd_role::decode, decode_layout),
                                 pd_handshake(topo::pd_role::prefill, prefill_layout));
    REQUIRE(pair.a->start(da.events()).is_ok());
    REQUIRE(pair.b->start(pb.events()).is_ok());
    REQUIRE(da.wait([&] { return !da.lost.empty(); }));
    REQUIRE(pb.wait([&] { return !pb.lost.empty(); }));
    CHECK(da.ready.empty());
    CHECK(pb.ready.empty());
    for (const std::string& msg : {da.lost[0].second.message(), pb.lost[0].second.message()}) {
        CHECK(msg.find("layout mismatch") != std::string::npos);
        CHECK(msg.find(decode_layout.describe()) != std::string::npos);
        CHECK(msg.find(prefill_layout.describe()) != std::string::npos);
    }
}

TEST_CASE("inproc: a handshake that never completes trips its deadline; the loop is supervised") {
    // Declared first: the transports (destroyed earlier) call into them until stopped.
    event_log da;
    auto layout = tiny_layout();
    auto beat = std::make_shared<heartbeat>("transport");
    auto pair = make_inproc_pair(pd_handshake(topo::pd_role::decode, layout, 100),
                                 pd_handshake(topo::pd_role::prefill, layout), beat);
    const int64_t t0 = monotonic_ms();
    REQUIRE(pair.a->start(da.events()).is_ok());  // b is never started
    REQUIRE(da.wait([&] { return !da.lost.empty(); }, 3000));
    CHECK(monotonic_ms() - t0 >= 100);
    CHECK(da.lost[0].second.code() == error_code::deadline_exceeded);
    CHECK(da.lost[0].second.message().find("100 ms") != std::string::npos);
    CHECK_FALSE(beat->problem(monotonic_ms(), 10000).has_value());  // alive and idle
    pair.a->stop();
    REQUIRE(beat->problem(monotonic_ms(), 10000).has_value());  // a stopped loop is dead
    CHECK(beat->problem(monotonic_ms(), 10000)->find("stopped") != std::string::npos);
}
