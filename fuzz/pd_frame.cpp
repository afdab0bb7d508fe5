// Fuzz target: the pd wire — transport frames (transport/frame.h) and the pd messages they carry
// (topo/pd_protocol.h). Input: a mode byte, then either
//   0: a byte stream cut into reads (one more byte), as a tcp link's frame_reader sees it, each
//      whole frame decoded as a pd message;
//   1: a kind (u16) and a payload handed straight to decode_message (past the checksums, which
//      random bytes rarely satisfy), so every message decoder is reached.
// Properties: no crash or read outside the input (ASan); the reader consumes what it is fed and a
// fatal error stays fatal; a message that decodes re-encodes to bytes that decode to the same
// encoding; frames round-trip.
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "topo/pd_protocol.h"
#include "transport/frame.h"

using namespace tandem;

namespace {

constexpr int64_t k_max_payload = 1 << 16;

std::span<const std::byte> as_bytes(std::string_view s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

void check_message(uint16_t kind, std::span<const std::byte> payload) {
    auto decoded = topo::decode_message(kind, payload);
    if (!decoded) {
        FUZZ_CHECK(!decoded.error().message().empty());
        return;
    }
    FUZZ_CHECK(topo::kind_of(*decoded) == kind, "kind {} decoded as {}", kind, topo::kind_of(*decoded));
    transport::frame once = topo::encode_message(*decoded);
    auto again = topo::decode_message(once.kind, once.payload);
    FUZZ_CHECK(again.is_ok(), "re-encoded kind {} does not decode: {}", kind, again.error().message());
    transport::frame twice = topo::encode_message(*again);
    FUZZ_CHECK(once.kind == twice.kind && once.payload == twice.payload, "kind {} round trip", kind);
}

void stream_mode(fuzz::input_reader& in) {
    size_t read_size = 1 + in.byte() % 61;
    std::string_view bytes = in.rest();
    transport::frame_reader reader(k_max_payload);
    int64_t fed = 0;
    bool fatal = false;
    for (size_t at = 0; at < bytes.size(); at += read_size) {
        std::string_view read = bytes.substr(at, read_size);
        reader.feed(as_bytes(read));
        fed += static_cast<int64_t>(read.size());
        for (;;) {
            transport::frame f;
            transport::frame_error e = reader.next(f);
            if (e == transport::frame_error::none) {
                FUZZ_CHECK(!fatal, "a frame after a fatal error");
                FUZZ_CHECK(static_cast<int64_t>(f.payload.size()) <= k_max_payload);
                check_message(f.kind, f.payload);
                continue;
            }
            if (e == transport::frame_error::bad_payload_checksum) continue;
            if (transport::frame_error_is_fatal(e)) fatal = true;
            break;
        }
        FUZZ_CHECK(reader.buffered() <= fed);
    }
}

void message_mode(fuzz::input_reader& in) {
    uint16_t kind = in.u16();
    std::string_view payload = in.rest();
    check_message(kind, as_bytes(payload));
    // The frame around it: encoded then decoded, the same kind and payload.
    std::vector<std::byte> wire;
    transport::encode_frame(kind, as_bytes(payload), wire);
    transport::decode_outcome d = transport::decode_frame(wire, k_max_payload);
    if (static_cast<int64_t>(payload.size()) > k_max_payload) {
        FUZZ_CHECK(d.error == transport::frame_error::too_large);
        return;
    }
    FUZZ_CHECK(d.error == transport::frame_error::none);
    FUZZ_CHECK(d.consumed == static_cast<int64_t>(wire.size()));
    FUZZ_CHECK(d.frame.kind == kind && d.frame.payload.size() == payload.size());
    FUZZ_CHECK(payload.empty() || std::memcmp(d.frame.payload.data(), payload.data(), payload.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::input_reader in(data, size);
    if (in.byte() % 2 == 0) stream_mode(in); else message_mode(in);
    return 0;
}
