// transport/tcp.h — The tcp transport: pd peers across processes and nodes, over libuv.
//
// One loop thread owns the listener, every connection, the reconnect timers and the fault
// injector; callers only post frames (send) and read stats. A decode process lists several
// prefill servers in `peers` and keeps a connection to each, reconnecting with exponential
// backoff; configured peers keep their peer_id (index + 1) across reconnects, accepted
// connections get fresh ids. A refused handshake (layout mismatch) is retried only every
// reconnect_max_ms: it heals when the peer is restarted with a matching config. Progress is
// reported through a core/liveness heartbeat; if the loop ever exits it is marked dead
// (invariant 10).
//
// Peer liveness (invariant 12): an open socket proves nothing — a stopped process, a hung host
// or a dead NIC keeps it open. Each side PINGs every ready link each heartbeat_interval_ms and
// the other answers PONG from its loop thread (every protocol version does, so this needs no
// wire change). Only a PONG counts: it shows the peer both read our PING and wrote back, so a
// peer that stops reading while still writing is caught too. No PONG for peer_timeout_ms closes
// the link as lost (the usual on_peer_lost, then redial with backoff): the miss count is
// peer_timeout_ms / heartbeat_interval_ms. When this loop itself did not run for longer than an
// interval (this process was stopped or starved), the silence was ours: every peer's clock
// restarts instead of blaming it.
//
// Outgoing bytes are queued in libuv without a bound: callers back-pressure at the request level
// (the scheduler limits in-flight transfers, invariant 11).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "transport/transport.h"

namespace tandem::transport {

// Fault injection for tests and chaos runs (design.md "fault injection"). All off by default.
// Corruption, delay and storms act on protocol frames this side sends; stall and drop act on the
// link as a whole.
struct fault_options {
    int64_t delay_ms = 0;             // each outgoing protocol frame waits this long
    int64_t stall_ms = 0;             // stop reading a link for this long, once per link ...
    int64_t stall_after_frames = 0;   // ... after this many frames arrived on it (0: at connect)
    int64_t drop_after_frames = 0;    // close a link after this many frames in+out (0: never)
    double corrupt_probability = 0.0; // flip one random byte of an outgoing frame
    int64_t abort_storm = 0;          // extra frames made by storm_frame after each frame sent
    std::function<frame(uint64_t n)> storm_frame;  // e.g. an ABORT for a random request id
    uint64_t seed = 1;                // the injector's random stream (reproducible runs)
};

struct tcp_options {
    std::string name = "tcp";        // names the loop in heartbeats and messages
    std::string listen_host;         // empty: do not listen (a pure decode client)
    int64_t listen_port = 0;         // 0: any free port; see tcp_transport::bound_port()
    std::vector<std::string> peers;  // "host:port" to connect to
    handshake_options handshake;
    int64_t reconnect_min_ms = 50;   // first retry delay; doubles up to reconnect_max_ms
    int64_t reconnect_max_ms = 2000;
    int64_t max_payload = k_default_max_payload;  // larger frames are garbage: link closed
    // Liveness of ready links: a PING every heartbeat_interval_ms; a peer that answered none
    // (no PONG) for peer_timeout_ms stopped reading or writing and is declared lost.
    int64_t heartbeat_interval_ms = 1000;
    int64_t peer_timeout_ms = 5000;
    fault_options faults;
    std::shared_ptr<heartbeat> beat;  // optional supervision
};

class tcp_transport : public transport {
public:
    // Resolves peers and binds the listener (errors name the address); start() runs the loop.
    static result<std::unique_ptr<tcp_transport>> create(tcp_options opt);
    virtual int bound_port() const = 0;  // the listener's port (0 without one)
};

// The [transport] fault_* keys as fault_options. `storm_frame` makes the abort-storm frames: their
// content (an ABORT message) belongs to the pd layer, see topo/pd_faults.h.
fault_options fault_options_from_config(const transport_section& t,
                                        std::function<frame(uint64_t n)> storm_frame = {});

// tcp_options from the [transport] section: the prefill role listens on listen_host:listen_port,
// the decode role dials every entry of `peers`; reconnect_min/max_ms, max_frame_bytes and the
// fault_* keys carry over. The handshake payload and check come from the pd layer
// (topo::pd_endpoint::handshake); its timeout is transport.handshake_timeout_ms. `t` must be a
// loaded (validated) section: a default-constructed one has zero limits.
tcp_options tcp_options_from_config(const transport_section& t, bool is_prefill,
                                    handshake_options handshake,
                                    std::function<frame(uint64_t n)> storm_frame = {});

}  // namespace tandem::transport
