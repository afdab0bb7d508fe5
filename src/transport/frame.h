// transport/frame.h — The wire frame every byte-stream transport carries; pure encode/decode.
//
// Layout (little-endian):
//   header  magic u32 | version u16 | kind u16 | payload length u32 | header check u32
//   payload length bytes
//   trailer XXH3-64 of the payload
// Why two checks: the header check (low 32 bits of XXH3-64 over the first 12 bytes) lets a reader
// trust the length before waiting for that many bytes, so a corrupted length can never make it
// stall or over-read; the payload checksum lets it drop one corrupted frame and stay in sync.
//
// The transport owns the control kinds below (handshake and keepalive); every other kind is
// opaque to it and belongs to the protocol above (topo/pd_protocol.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace tandem::transport {

inline constexpr uint32_t k_frame_magic = 0x464D4454u;  // "TDMF" on the wire
inline constexpr uint16_t k_wire_version = 1;
inline constexpr int64_t k_frame_header_bytes = 16;
inline constexpr int64_t k_frame_trailer_bytes = 8;
inline constexpr int64_t k_default_max_payload = int64_t{256} << 20;

namespace control_kind {
inline constexpr uint16_t hello = 1;      // opaque hello payload (the protocol's HELLO)
inline constexpr uint16_t hello_ack = 2;  // empty: "your hello was accepted"
inline constexpr uint16_t refuse = 3;     // reason string: the handshake failed, closing
inline constexpr uint16_t ping = 4;       // u64 nonce, answered by pong with the same nonce
inline constexpr uint16_t pong = 5;
inline constexpr uint16_t first_protocol_kind = 16;
}  // namespace control_kind

struct frame {
    uint16_t kind = 0;
    std::vector<std::byte> payload;
};

enum class frame_error : uint8_t {
    none,                  // a whole, verified frame
    need_more,             // not enough bytes yet
    bad_payload_checksum,  // header fine, payload corrupt: drop this frame, stream still in sync
    // Fatal: the stream cannot be trusted any more; the connection must be closed.
    bad_magic,
    bad_version,
    bad_header_check,
    too_large,
};
const char* frame_error_name(frame_error e);
inline bool frame_error_is_fatal(frame_error e) { return e >= frame_error::bad_magic; }

// Appends one encoded frame to `out`.
void encode_frame(uint16_t kind, std::span<const std::byte> payload, std::vector<std::byte>& out);
std::vector<std::byte> encode_frame(const frame& f);
inline int64_t encoded_frame_bytes(int64_t payload) {
    return k_frame_header_bytes + payload + k_frame_trailer_bytes;
}

struct frame_view {
    uint16_t kind = 0;
    std::span<const std::byte> payload;
};
struct decode_outcome {
    frame_error error = frame_error::need_more;
    int64_t consumed = 0;  // bytes to skip: the whole frame for none / bad_payload_checksum
    frame_view frame;      // valid only when error == none
};
// Decodes the frame at the start of `bytes`; never reads outside `bytes`.
decode_outcome decode_frame(std::span<const std::byte> bytes, int64_t max_payload);

// Reassembles frames from a byte stream (TCP reads arrive in arbitrary pieces).
class frame_reader {
public:
    explicit frame_reader(int64_t max_payload = k_default_max_payload) : max_(max_payload) {}
    void feed(std::span<const std::byte> bytes);
    // none: `out` holds the next frame. need_more: wait for bytes. bad_payload_checksum: one
    // frame was dropped, call again. Fatal errors stay fatal (the reader is poisoned).
    frame_error next(frame& out);
    int64_t buffered() const { return static_cast<int64_t>(buf_.size() - start_); }

private:
    int64_t max_;
    std::vector<std::byte> buf_;
    size_t start_ = 0;
    frame_error fatal_ = frame_error::none;
};

// The refuse payload: a reason string (shared with topo/pd_protocol's REFUSE).
std::vector<std::byte> encode_reason(const std::string& reason);
result<std::string> decode_reason(std::span<const std::byte> payload);
inline constexpr size_t k_max_reason_bytes = 16 * 1024;

}  // namespace tandem::transport
