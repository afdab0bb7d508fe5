// transport/nccl.h — GPU-to-GPU transfers inside a node: the transport interface for frames plus
// NCCL point-to-point for page bytes that live in device memory.
//
// Owns: one NCCL communicator and CUDA stream per peer, their bootstrap, and bulk sends/receives.
// Frames (the pd protocol, with PAGE_WRITE carrying metadata and the checksum but no data) go over
// a wrapped control transport (tcp or inproc), so the handshake, deadlines, stats and fault
// injection are those of the control transport.
//
// Bootstrap: when the control link is ready, the initiator (the decode side, rank 0) creates an
// NCCL unique id and sends it in a frame of kind k_nccl_bootstrap_kind; both sides then join a
// two-rank communicator. on_peer_ready is reported only once the communicator is up.
// NCCL init blocks the control thread for its duration (once per peer connection).
//
// Ordering contract (why it is safe without per-write tags): NCCL matches sends and receives
// between two ranks in posting order, and the control stream delivers frames in order, so a
// receiver that posts recv_buffer for each PAGE_WRITE frame, in frame order, gets each span's
// bytes. Nothing runs on them before flush() returned ok and checksum_device() matched the
// frame's checksum (invariant 3). A stuck transfer is ended by flush()'s deadline with
// ncclCommAbort, never by killing a thread (serving-peers.md §7).
//
// Without CUDA (or without a GPU), create() returns unavailable with the reason.
#pragma once

#include <memory>

#include "transport/buffer_channel.h"
#include "transport/transport.h"

namespace tandem::transport {

inline constexpr uint16_t k_nccl_bootstrap_kind = 0xff00;  // reserved: never a pd message kind

struct nccl_options {
    int device = 0;          // CUDA device of this side's pool
    bool initiator = false;  // true on the decode side: creates the NCCL id, is rank 0
};

// The buffer_channel (buffer_channel.h) over NCCL: bulk device bytes queued in posting order on
// the peer's stream, each send meeting a receive of the same size on the other side, callable from
// one thread per peer at a time; flush() waits for the stream and, on timeout or an NCCL error,
// aborts the communicator (the peer is then no longer ready, and the error says why);
// discard_buffer receives into a per-peer device scratch; checksum_device is the device XXH3
// (cuda/kernels_checksum.cu), so nothing is read back to verify it.
class nccl_transport : public transport, public buffer_channel {
public:
    static result<std::unique_ptr<nccl_transport>> create(std::unique_ptr<transport> control,
                                                          nccl_options opt);
};

}  // namespace tandem::transport
