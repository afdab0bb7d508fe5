// The [transport] section as tcp options: every key reaches tcp_options, and the pd layer's fault
// options make abort-storm frames that are well-formed ABORTs for requests that cannot exist.
#include <doctest/doctest.h>

#include <set>

#include "core/config.h"
#include "topo/pd_faults.h"
#include "topo/pd_protocol.h"
#include "transport/tcp.h"

using namespace tandem;
using namespace tandem::transport;

namespace {

transport_section loaded_with(std::vector<std::string> sets) {
    config_sources src;
    src.set_overrides = std::move(sets);
    auto cfg = load_config(src);
    REQUIRE_MESSAGE(cfg, cfg.error().message());
    return cfg->transport;
}

transport_section every_key_set() {
    return loaded_with({"transport.listen_host=10.1.2.3", "transport.listen_port=9123",
                        "transport.peers=a:1,b:2", "transport.handshake_timeout_ms=777",
                        "transport.reconnect_min_ms=9", "transport.reconnect_max_ms=900",
                        "transport.max_frame_bytes=1048576", "transport.fault_delay_ms=3",
                        "transport.fault_stall_ms=40", "transport.fault_stall_after_frames=5",
                        "transport.fault_drop_after_frames=60",
                        "transport.fault_corrupt_probability=0.125",
                        "transport.fault_abort_storm=2", "transport.fault_seed=99",
                        "transport.heartbeat_interval_ms=125", "transport.peer_timeout_ms=750"});
}

}  // namespace

TEST_CASE("transport config: tcp_options_from_config maps every [transport] key") {
    transport_section t = every_key_set();
    handshake_options hs;
    hs.hello = {std::byte{1}, std::byte{2}};
    tcp_options p = tcp_options_from_config(t, /*is_prefill=*/true, hs);
    CHECK(p.listen_host == "10.1.2.3");
    CHECK(p.listen_port == 9123);
    CHECK(p.peers.empty());
    CHECK(p.handshake.timeout_ms == 777);
    CHECK(p.handshake.hello == hs.hello);
    CHECK(p.reconnect_min_ms == 9);
    CHECK(p.reconnect_max_ms == 900);
    CHECK(p.max_payload == 1048576);
    CHECK(p.heartbeat_interval_ms == 125);
    CHECK(p.peer_timeout_ms == 750);
    CHECK(p.faults.delay_ms == 3);
    CHECK(p.faults.stall_ms == 40);
    CHECK(p.faults.stall_after_frames == 5);
    CHECK(p.faults.drop_after_frames == 60);
    CHECK(p.faults.corrupt_probability == doctest::Approx(0.125));
    CHECK(p.faults.abort_storm == 2);
    CHECK(p.faults.seed == 99);
    CHECK_FALSE(p.faults.storm_frame);  // none given: the storm stays silent

    tcp_options d = tcp_options_from_config(t, /*is_prefill=*/false, hs, topo::make_storm_abort_frame);
    CHECK(d.listen_host.empty());
    CHECK(d.peers == std::vector<std::string>{"a:1", "b:2"});
    CHECK(d.max_payload == 1048576);
    REQUIRE(d.faults.storm_frame);
    CHECK(d.faults.storm_frame(0).kind == static_cast<uint16_t>(topo::pd_kind::abort));
}

TEST_CASE("transport config: the shipped defaults give the transport's own defaults, faults off") {
    tcp_options o = tcp_options_from_config(loaded_with({}), false, handshake_options{});
    tcp_options built_in;
    CHECK(o.reconnect_min_ms == built_in.reconnect_min_ms);
    CHECK(o.reconnect_max_ms == built_in.reconnect_max_ms);
    CHECK(o.max_payload == k_default_max_payload);
    CHECK(o.heartbeat_interval_ms == built_in.heartbeat_interval_ms);
    CHECK(o.peer_timeout_ms == built_in.peer_timeout_ms);
    CHECK(o.peer_timeout_ms == 5000);
    CHECK(o.faults.delay_ms == 0);
    CHECK(o.faults.stall_ms == 0);
    CHECK(o.faults.drop_after_frames == 0);
    CHECK(o.faults.corrupt_probability == 0.0);
    CHECK(o.faults.abort_storm == 0);
    CHECK(o.faults.seed == built_in.faults.seed);
}

TEST_CASE("transport config: pd_fault_options storms are ABORTs for request ids that never exist") {
    transport_section t = every_key_set();
    fault_options f = topo::pd_fault_options(t);
    CHECK(f.abort_storm == 2);
    CHECK(f.corrupt_probability == doctest::Approx(0.125));
    CHECK(f.seed == 99);
    REQUIRE(f.storm_frame);
    std::set<uint64_t> ids;
    for (uint64_t n = 0; n < 64; ++n) {
        frame fr = f.storm_frame(n);
        auto m = topo::decode_message(fr.kind, fr.payload);
        REQUIRE_MESSAGE(m, m.error().message());
        auto* abort = std::get_if<topo::abort_msg>(&*m);
        REQUIRE(abort != nullptr);
        CHECK(abort->cause == topo::abort_cause::client);
        CHECK((abort->request_id & topo::k_storm_request_id_bit) != 0);  // never a real id
        ids.insert(abort->request_id);
    }
    CHECK(ids.size() == 64);  // distinct ids, not one repeated abort
    CHECK(f.storm_frame(5).payload == f.storm_frame(5).payload);  // reproducible
}
