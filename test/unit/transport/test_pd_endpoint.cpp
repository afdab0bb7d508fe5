// pd_endpoint over inproc: typed dispatch per role; malformed payloads and kinds a role never
// receives are counted and dropped, never handed to a handler.
#include <doctest/doctest.h>

#include <atomic>

#include "topo/pd_endpoint.h"
#include "topo/pd_metrics_text.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::topo;
using namespace tandem::transport;
using namespace tandem::transport::testing;

namespace {

// The decode endpoint on side a, the prefill one on side b of an inproc pair, both past the
// handshake. `ready` is counted by on_peer_ready handlers this sets on both handler sets.
inproc_pair connect_pair(pd_endpoint& decode, pd_handlers& dh, pd_endpoint& prefill,
                         pd_handlers& ph, std::atomic<int>& ready, event_log& sync) {
    // Pointers, not the reference parameters: the handlers outlive this call.
    dh.on_peer_ready = [r = &ready, l = &sync](peer_id, const std::string&) {
        ++*r;
        l->add([] {});
    };
    ph.on_peer_ready = dh.on_peer_ready;
    auto pair = make_inproc_pair(decode.handshake(1000), prefill.handshake(1000));
    REQUIRE(pair.a->start(decode.events(dh)).is_ok());
    REQUIRE(pair.b->start(prefill.events(ph)).is_ok());
    REQUIRE(sync.wait([&] { return ready == 2; }));
    return pair;
}

}  // namespace

TEST_CASE("pd_endpoint: roles get their messages; the rest is counted and dropped") {
    auto layout = tiny_layout();
    pd_endpoint decode(pd_role::decode, layout), prefill(pd_role::prefill, layout);
    std::atomic<int> jobs{0}, dones{0}, aborts{0}, ready{0};
    event_log sync;  // only for waiting
    pd_handlers dh;
    dh.on_done = [&](peer_id, prefill_done_msg&& d) { CHECK(d.first_token == 9); ++dones; sync.add([] {}); };
    pd_handlers ph;
    ph.on_job = [&](peer_id, prefill_job_msg&& j) { CHECK(j.token_ids.size() == 3); ++jobs; sync.add([] {}); };
    ph.on_abort = [&](peer_id, abort_msg&&) { ++aborts; sync.add([] {}); };
    auto pair = connect_pair(decode, dh, prefill, ph, ready, sync);

    prefill_job_msg job;
    job.request_id = 1;
    job.token_ids = {1, 2, 3};
    job.slot = {0, 1};
    job.deadline_ms = 100;
    REQUIRE(decode.send(*pair.a, 1, job).is_ok());
    REQUIRE(decode.send(*pair.a, 1, abort_msg{1, abort_cause::client}).is_ok());
    prefill_done_msg done;
    done.first_token = 9;
    REQUIRE(prefill.send(*pair.b, 1, done).is_ok());
    // Wrong direction: a decode side never runs jobs; a prefill side gets no results.
    REQUIRE(prefill.send(*pair.b, 1, job).is_ok());
    REQUIRE(decode.send(*pair.a, 1, done).is_ok());
    // A frame of a known kind whose payload does not decode, and an unknown kind.
    REQUIRE(pair.a->send(1, frame{static_cast<uint16_t>(pd_kind::prefill_job), {std::byte{1}}}).is_ok());
    REQUIRE(pair.a->send(1, frame{77, {}}).is_ok());
    REQUIRE(sync.wait([&] { return prefill.counters().malformed + prefill.counters().unexpected == 3; }));
    REQUIRE(sync.wait([&] { return decode.counters().unexpected == 1; }));
    CHECK(jobs == 1);
    CHECK(aborts == 1);
    CHECK(dones == 1);
    CHECK(prefill.counters().messages == 2);
    CHECK(prefill.counters().malformed == 2);   // the bad payload and the unknown kind
    CHECK(prefill.counters().unexpected == 1);  // the PREFILL_DONE
    CHECK(decode.counters().messages == 1);
    pair.a->stop();
    pair.b->stop();
}

// The lesson of a deployment whose transfer thread died on an unexpected ABORT: a frame this side
// cannot take — a kind from a newer protocol, a message for the other role, an unknown control
// kind — is counted by kind and logged, and the link keeps delivering what comes after it.
TEST_CASE("pd_endpoint: dropped frames are counted by kind and the link lives on") {
    auto layout = tiny_layout();
    pd_endpoint decode(pd_role::decode, layout), prefill(pd_role::prefill, layout);
    std::atomic<int> ready{0}, dones{0};
    event_log sync;
    pd_handlers dh;
    dh.on_done = [&](peer_id, prefill_done_msg&&) { ++dones; sync.add([] {}); };
    pd_handlers ph;
    auto pair = connect_pair(decode, dh, prefill, ph, ready, sync);

    prefill_job_msg job;
    job.request_id = 1;
    job.token_ids = {1, 2, 3};
    REQUIRE(prefill.send(*pair.b, 1, job).is_ok());          // the decode role takes no jobs
    REQUIRE(pair.b->send(1, frame{40, {}}).is_ok());         // a kind this version does not know
    REQUIRE(pair.b->send(1, frame{40, {std::byte{7}}}).is_ok());
    REQUIRE(pair.b->send(1, frame{900, {}}).is_ok());        // beyond the counted slots
    REQUIRE(pair.b->send(1, frame{9, {}}).is_ok());          // an unknown control kind
    prefill_done_msg done;
    done.first_token = 4;
    REQUIRE(prefill.send(*pair.b, 1, done).is_ok());         // and the link still delivers
    REQUIRE(sync.wait([&] { return dones == 1; }));

    const pd_counters c = decode.counters();
    CHECK(c.dropped_by_kind[static_cast<size_t>(pd_kind::prefill_job)] == 1);
    CHECK(c.dropped_by_kind[40] == 2);
    CHECK(c.dropped_by_kind[k_pd_kind_slots - 1] == 1);
    int64_t total = 0;
    for (int64_t n : c.dropped_by_kind) total += n;
    CHECK(total == c.malformed + c.unexpected);
    CHECK(pair.a->total_stats().frames_dropped == 1);  // the control kind stops at the transport

    CHECK(pd_kind_slot_label(static_cast<size_t>(pd_kind::abort)) == "ABORT");
    CHECK(pd_kind_slot_label(40) == "40");
    CHECK(pd_kind_slot_label(k_pd_kind_slots - 1) == "other");
    std::string text;
    render_decode_metrics(text, pd_decode_metrics{}, c, pair.a->total_stats());
    CHECK(text.find("tandem_pd_decode_transport_dropped_messages_total{kind=\"PREFILL_JOB\"} 1\n") !=
          std::string::npos);
    CHECK(text.find("tandem_pd_decode_transport_dropped_messages_total{kind=\"40\"} 2\n") !=
          std::string::npos);
    CHECK(text.find("tandem_pd_decode_transport_dropped_messages_total{kind=\"other\"} 1\n") !=
          std::string::npos);
    CHECK(text.find("tandem_pd_decode_transport_frames_dropped_total 1\n") != std::string::npos);
    pair.a->stop();
    pair.b->stop();
}
