// transport/buffer_channel.h — Bulk device bytes between two pd peers, beside the frame transport:
// what carries PAGE_WRITE data when transport.kind = "nccl" (the frames stay on the control channel).
//
// Contract (NCCL point-to-point's, so the NCCL transport implements it directly): sends and
// receives between two peers match in posting order, by size; nothing is tagged. A receiver must
// therefore post exactly one receive (or discard) per buffer the sender posted, in frame order —
// also for a write it refuses (stale epoch, a request it no longer tracks), or every later buffer
// on the link lands in the wrong place. A size mismatch or a failure breaks the channel for that
// peer (sticky: every later call fails), which pd turns into failed transfers, never into wrong
// bytes. Bytes received are usable only after flush() returned ok, and run only after their device
// XXH3 (checksum_device) matched the frame's checksum (invariant 3). The sender's source bytes must
// stay unchanged until the receiver has flushed (pd holds the source pages until SPANS_RELEASED).
//
// Implementations: the NCCL transport (cuda/nccl_transport.cu; compiled, never run: it needs two
// GPUs), and an in-process loopback pair whose "device" is host memory — the host emulation of the
// device pools — which CI runs the whole wiring over.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "transport/transport.h"

namespace tandem::transport {

class buffer_channel {
public:
    virtual ~buffer_channel() = default;
    // Queue `bytes` at `device_ptr` for the peer (asynchronous; the bytes must not change until
    // the peer received them). Any thread, one at a time per peer.
    virtual status send_buffer(peer_id peer, const void* device_ptr, int64_t bytes) = 0;
    // Post the receive of the peer's next buffer into `device_ptr`; complete after flush().
    virtual status recv_buffer(peer_id peer, void* device_ptr, int64_t bytes) = 0;
    // Receive the peer's next buffer into scratch and drop it (a refused write keeps the order).
    virtual status discard_buffer(peer_id peer, int64_t bytes) = 0;
    // Waits until everything posted for the peer completed; on timeout or error the peer's channel
    // is broken and the error says why.
    virtual status flush(peer_id peer, int64_t timeout_ms) = 0;
    // XXH3-64 of device bytes, computed on the device (the receiver's verification).
    virtual result<uint64_t> checksum_device(const void* device_ptr, int64_t bytes) = 0;
};

// Two in-process endpoints; each sees the other as peer 1 (as make_inproc_pair). `checksum` hashes
// bytes of the emulated device (host memory): the device runtime's checksum, i.e. the device XXH3.
struct buffer_channel_pair {
    std::unique_ptr<buffer_channel> a;
    std::unique_ptr<buffer_channel> b;
};
buffer_channel_pair make_loopback_buffer_channels(std::function<result<uint64_t>(const void*, int64_t)> checksum);

}  // namespace tandem::transport
