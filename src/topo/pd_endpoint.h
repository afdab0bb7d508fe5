// topo/pd_endpoint.h — One side (prefill or decode) of the pd protocol on top of a transport.
//
// Owns: the handshake options for a role and layout (HELLO out, the peer's HELLO checked), and
// turning the transport's raw frames into typed pd messages: a frame that does not decode, or a
// kind this role never receives (a decode side sent a PREFILL_JOB), is counted and dropped here
// (design invariant 5), so handlers only ever see well-formed messages meant for them.
//
// Threading: handlers run on the transport's thread. Engines should only post the message into
// their scheduler's inbox there (one owning thread per piece of state, style habit 2).
#pragma once

#include <atomic>
#include <functional>

#include "topo/pd_protocol.h"
#include "transport/transport.h"

namespace tandem::topo {

struct pd_handlers {
    // Either role.
    std::function<void(transport::peer_id, const std::string& name)> on_peer_ready;
    std::function<void(transport::peer_id, const status& why)> on_peer_lost;
    std::function<void(transport::peer_id, abort_msg&&)> on_abort;
    std::function<void(transport::peer_id, abort_ack_msg&&)> on_abort_ack;
    // Prefill role receives jobs.
    std::function<void(transport::peer_id, prefill_job_msg&&)> on_job;
    // Decode role receives the results.
    std::function<void(transport::peer_id, page_write_msg&&)> on_page_write;
    std::function<void(transport::peer_id, state_write_msg&&)> on_state_write;
    std::function<void(transport::peer_id, prefill_done_msg&&)> on_done;
    std::function<void(transport::peer_id, prefill_failed_msg&&)> on_failed;
};

struct pd_counters {
    int64_t messages = 0;    // delivered to a handler
    int64_t malformed = 0;   // frames whose payload did not decode
    int64_t unexpected = 0;  // well-formed, but not a kind this role receives (or no handler)
};

class pd_endpoint {
public:
    pd_endpoint(pd_role role, const cache::layout_spec& layout, model_identity model = {});

    pd_role role() const { return hello_.role; }
    const hello_msg& hello() const { return hello_; }
    // What to give the transport: our HELLO and the check of the peer's.
    transport::handshake_options handshake(int64_t timeout_ms) const;
    // Events for transport::start; `h` must outlive the transport's thread.
    transport::transport_events events(pd_handlers h);
    status send(transport::transport& t, transport::peer_id peer, const pd_message& m) const {
        return t.send(peer, encode_message(m));
    }
    pd_counters counters() const;

private:
    void dispatch(const pd_handlers& h, transport::peer_id peer, transport::frame&& f);

    hello_msg hello_;
    std::atomic<int64_t> messages_{0}, malformed_{0}, unexpected_{0};
};

}  // namespace tandem::topo
