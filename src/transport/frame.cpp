// transport/frame.cpp — Frame encoding, decoding and stream reassembly.
#include "transport/frame.h"

#include <xxhash.h>

#include "transport/wire.h"

namespace tandem::transport {

const char* frame_error_name(frame_error e) {
    switch (e) {
        case frame_error::none: return "none";
        case frame_error::need_more: return "need_more";
        case frame_error::bad_payload_checksum: return "bad payload checksum";
        case frame_error::bad_magic: return "bad magic";
        case frame_error::bad_version: return "unsupported wire version";
        case frame_error::bad_header_check: return "bad header check";
        case frame_error::too_large: return "payload too large";
    }
    return "unknown";
}

namespace {

uint32_t header_check(const std::byte* first12) {
    return static_cast<uint32_t>(XXH3_64bits(first12, 12));
}

uint64_t read_le(const std::byte* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

}  // namespace

void encode_frame(uint16_t kind, std::span<const std::byte> payload, std::vector<std::byte>& out) {
    const size_t start = out.size();
    out.reserve(start + static_cast<size_t>(encoded_frame_bytes(static_cast<int64_t>(payload.size()))));
    wire_writer w(out);
    w.u32(k_frame_magic);
    w.u16(k_wire_version);
    w.u16(kind);
    w.u32(static_cast<uint32_t>(payload.size()));
    w.u32(header_check(out.data() + start));
    out.insert(out.end(), payload.begin(), payload.end());
    w.u64(XXH3_64bits(payload.data(), payload.size()));
}

std::vector<std::byte> encode_frame(const frame& f) {
    std::vector<std::byte> out;
    encode_frame(f.kind, f.payload, out);
    return out;
}

decode_outcome decode_frame(std::span<const std::byte> bytes, int64_t max_payload) {
    decode_outcome r;
    if (bytes.size() < static_cast<size_t>(k_frame_header_bytes)) {
        // Reject a wrong magic as soon as it is visible: garbage fails fast instead of waiting.
        const size_t n = std::min<size_t>(bytes.size(), 4);
        for (size_t i = 0; i < n; ++i) {
            if (bytes[i] != static_cast<std::byte>(k_frame_magic >> (8 * i))) {
                r.error = frame_error::bad_magic;
                return r;
            }
        }
        return r;  // need_more
    }
    const std::byte* p = bytes.data();
    if (read_le(p, 4) != k_frame_magic) { r.error = frame_error::bad_magic; return r; }
    if (read_le(p + 12, 4) != header_check(p)) { r.error = frame_error::bad_header_check; return r; }
    if (read_le(p + 4, 2) != k_wire_version) { r.error = frame_error::bad_version; return r; }
    const int64_t len = static_cast<int64_t>(read_le(p + 8, 4));
    if (len > max_payload) { r.error = frame_error::too_large; return r; }
    const int64_t total = encoded_frame_bytes(len);
    if (static_cast<int64_t>(bytes.size()) < total) return r;  // need_more
    const std::byte* payload = p + k_frame_header_bytes;
    r.consumed = total;
    if (read_le(payload + len, 8) != XXH3_64bits(payload, static_cast<size_t>(len))) {
        r.error = frame_error::bad_payload_checksum;
        return r;
    }
    r.error = frame_error::none;
    r.frame.kind = static_cast<uint16_t>(read_le(p + 6, 2));
    r.frame.payload = std::span<const std::byte>(payload, static_cast<size_t>(len));
    return r;
}

void frame_reader::feed(std::span<const std::byte> bytes) {
    if (fatal_ != frame_error::none) return;
    // Compact lazily: only when the consumed prefix dominates, so feeding stays amortized O(n).
    if (start_ > 0 && start_ * 2 >= buf_.size()) {
        buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
        start_ = 0;
    }
    buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

frame_error frame_reader::next(frame& out) {
    if (fatal_ != frame_error::none) return fatal_;
    auto view = std::span<const std::byte>(buf_).subspan(start_);
    decode_outcome d = decode_frame(view, max_);
    if (frame_error_is_fatal(d.error)) {
        fatal_ = d.error;
        buf_.clear();
        start_ = 0;
        return fatal_;
    }
    if (d.error == frame_error::none) {
        out.kind = d.frame.kind;
        out.payload.assign(d.frame.payload.begin(), d.frame.payload.end());
    }
    start_ += static_cast<size_t>(d.consumed);
    return d.error;
}

std::vector<std::byte> encode_reason(const std::string& reason) {
    std::vector<std::byte> out;
    wire_writer w(out);
    w.str(reason.size() > k_max_reason_bytes ? reason.substr(0, k_max_reason_bytes) : reason);
    return out;
}

result<std::string> decode_reason(std::span<const std::byte> payload) {
    wire_reader r(payload);
    std::string s = r.str(k_max_reason_bytes);
    if (!r.at_end()) return make_error(error_code::data_loss, "malformed reason string");
    return s;
}

}  // namespace tandem::transport
