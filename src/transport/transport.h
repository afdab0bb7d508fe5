// transport/transport.h — Moving frames between pd peers: the interface every transport
// (inproc, tcp, nccl) implements.
//
// Owns: peer connections, the handshake exchange and its deadline, framing, per-peer stats, and
// its own thread. Events (peer ready, frame, peer lost) are delivered ONLY on that thread, so a
// caller that owns state on another thread (the scheduler) should post them into its inbox.
// send() may be called from any thread.
//
// The handshake is generic: each side sends `handshake_options::hello` first; the peer's hello
// is judged by `check`; an error is sent back as REFUSE (the reason names both layouts for a
// layout mismatch) and the link is closed; success is answered by HELLO_ACK. A peer is "ready"
// once both hellos were accepted. Frames before that are dropped and counted. A handshake that
// does not finish within timeout_ms closes the link with deadline_exceeded (invariant 4).
//
// Untrusted input (invariant 5): a corrupt payload is dropped and counted; a frame whose header
// cannot be trusted closes that link and is counted; nothing a peer sends stops the thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/liveness.h"
#include "core/status.h"
#include "transport/frame.h"

namespace tandem::transport {

using peer_id = uint64_t;

struct peer_stats {
    int64_t bytes_sent = 0;
    int64_t bytes_received = 0;
    int64_t frames_sent = 0;
    int64_t frames_received = 0;    // verified frames handed to on_frame
    int64_t frames_dropped = 0;     // well-formed but not deliverable (before the handshake)
    int64_t malformed = 0;          // untrustworthy headers / garbage: the link was closed
    int64_t checksum_failures = 0;  // corrupt payloads, dropped
    int64_t connects = 0;           // links that became ready
    int64_t disconnects = 0;        // links lost (any cause)
    peer_stats& operator+=(const peer_stats& o);
};

struct handshake_options {
    std::vector<std::byte> hello;  // our HELLO payload (topo::encode_message(make_hello(...)))
    // Judges the peer's HELLO payload; ok → HELLO_ACK, error → REFUSE(reason) and close.
    std::function<status(std::span<const std::byte> peer_hello)> check;
    int64_t timeout_ms = 5000;
};

struct transport_events {
    std::function<void(peer_id, const std::string& peer_name)> on_peer_ready;
    std::function<void(peer_id, frame&&)> on_frame;  // protocol kinds only (>= 16)
    // Every link that closes reports here, ready or not (a failed handshake too), with why.
    std::function<void(peer_id, const status& why)> on_peer_lost;
};

class transport {
public:
    virtual ~transport() = default;
    // Starts the transport's thread; events flow until stop().
    virtual status start(transport_events events) = 0;
    // Closes every link and joins the thread; no event is delivered after it returns. Never
    // call it from an event handler (it would join its own thread).
    virtual void stop() = 0;
    // Queues a frame; unavailable when the peer is not ready. Delivery is in send order.
    virtual status send(peer_id peer, frame f) = 0;
    virtual std::vector<peer_id> ready_peers() const = 0;
    virtual peer_stats stats(peer_id peer) const = 0;
    virtual peer_stats total_stats() const = 0;
};

// Two endpoints in one process, one queue each way, a thread per endpoint. Frames travel as
// objects (no byte encoding); the handshake, deadlines and stats behave as over tcp. Each
// endpoint sees the other as peer 1.
struct inproc_pair {
    std::unique_ptr<transport> a;
    std::unique_ptr<transport> b;
};
inproc_pair make_inproc_pair(handshake_options a_opt, handshake_options b_opt,
                             std::shared_ptr<heartbeat> a_beat = nullptr,
                             std::shared_ptr<heartbeat> b_beat = nullptr);

}  // namespace tandem::transport
