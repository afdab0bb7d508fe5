// transport/handshake.h — The per-link handshake state machine shared by every transport
// (internal to transport/). Pure: it is fed frames and the clock, and says what to do.
#pragma once

#include <optional>
#include <string>

#include "core/log_limiter.h"
#include "transport/transport.h"

namespace tandem::transport {

class handshake_state {
public:
    handshake_state(const handshake_options& opt, int64_t now_ms)
        : opt_(&opt), deadline_ms_(now_ms + opt.timeout_ms) {}

    struct step {
        bool deliver = false;         // a protocol frame for on_frame
        bool dropped = false;         // a protocol frame before the handshake, an unknown control kind
        bool became_ready = false;    // call on_peer_ready
        std::optional<frame> reply;   // send this back (HELLO_ACK, REFUSE, PONG)
        bool heartbeat = false;       // PING or PONG: liveness only, not counted as traffic
        bool answered = false;        // a PONG: the peer read our PING and wrote back
        status failure;               // close the link with this reason
    };
    step on_frame(const frame& f);
    bool ready() const { return got_hello_ && got_ack_; }
    bool expired(int64_t now_ms) const { return !ready() && now_ms >= deadline_ms_; }
    status deadline_error(const std::string& peer_name) const;

    static frame hello_frame(const handshake_options& opt);
    // Logs a frame a step marked `dropped` (its kind, and why), through `limit` so a peer
    // repeating it cannot flood the log. Not part of the pure state machine: callers log.
    void log_dropped(const frame& f, const std::string& peer_name, log_limiter& limit,
                     int64_t now_ms) const;

private:
    const handshake_options* opt_;
    int64_t deadline_ms_;
    bool got_hello_ = false;
    bool got_ack_ = false;
};

}  // namespace tandem::transport
