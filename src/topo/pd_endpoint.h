// topo/pd_endpoint.h — One side (prefill or decode) of the pd protocol on top of a transport.
//
// Owns: the handshake options for a role and layout (HELLO out, the peer's HELLO checked), and
// turning the transport's raw frames into typed pd messages: a frame that does not decode, or a
// kind this role never receives (a decode side sent a PREFILL_JOB), is counted by kind, logged
// (rate-limited) and dropped here (design invariant 5), so handlers only ever see well-formed
// messages meant for them.
//
// Threading: handlers run on the transport's thread. Engines should only post the message into
// their scheduler's inbox there (one owning thread per piece of state, style habit 2).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "core/log_limiter.h"
#include "topo/pd_protocol.h"
#include "transport/transport.h"

namespace tandem::topo {

struct pd_handlers {
    // Either role.
    std::function<void(transport::peer_id, const std::string& name)> on_peer_ready;
    std::function<void(transport::peer_id, const status& why)> on_peer_lost;
    std::function<void(transport::peer_id, abort_msg&&)> on_abort;
    std::function<void(transport::peer_id, abort_ack_msg&&)> on_abort_ack;
    // Prefill role receives jobs, and releases of named source spans (pd on one device).
    std::function<void(transport::peer_id, prefill_job_msg&&)> on_job;
    std::function<void(transport::peer_id, spans_released_msg&&)> on_spans_released;
    // Decode role receives the results.
    std::function<void(transport::peer_id, page_write_msg&&)> on_page_write;
    std::function<void(transport::peer_id, page_span_msg&&)> on_page_span;  // null: not accepted
    std::function<void(transport::peer_id, page_buffer_msg&&)> on_page_buffer;  // null: not accepted
    std::function<void(transport::peer_id, state_write_msg&&)> on_state_write;
    std::function<void(transport::peer_id, prefill_done_msg&&)> on_done;
    std::function<void(transport::peer_id, prefill_failed_msg&&)> on_failed;
};

// Frame kinds counted one by one in pd_counters::dropped_by_kind; kinds from the last slot on
// share it, so a peer sending every possible kind cannot grow the metric without bound.
inline constexpr size_t k_pd_kind_slots = 64;

struct pd_counters {
    int64_t messages = 0;    // delivered to a handler
    int64_t malformed = 0;   // frames whose payload did not decode (or whose kind is unknown)
    int64_t unexpected = 0;  // well-formed, but not a kind this role receives (or no handler)
    // malformed + unexpected, by frame kind (the last slot: every kind >= k_pd_kind_slots - 1).
    std::array<int64_t, k_pd_kind_slots> dropped_by_kind{};
};

// The label of a dropped_by_kind slot: the kind's name ("ABORT"), its number when this version
// does not know it ("40"), or "other" for the shared last slot.
std::string pd_kind_slot_label(size_t slot);

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
    // Counts a dropped frame by kind and logs it, at most once a second: a peer repeating a frame
    // this side cannot take (a newer protocol's kind, a message for the other role) is worth
    // seeing in the log, never worth a dead link thread or a flooded disk.
    void count_dropped(transport::peer_id peer, uint16_t kind, std::string_view why);

    hello_msg hello_;
    std::atomic<int64_t> messages_{0}, malformed_{0}, unexpected_{0};
    std::array<std::atomic<int64_t>, k_pd_kind_slots> dropped_by_kind_{};
    log_limiter drop_log_{1000};
};

}  // namespace tandem::topo
