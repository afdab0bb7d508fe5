// transport/handshake.cpp — HELLO / HELLO_ACK / REFUSE / PING handling for one link.
#include "transport/handshake.h"

#include <fmt/format.h>

#include "core/log.h"

namespace tandem::transport {

peer_stats& peer_stats::operator+=(const peer_stats& o) {
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    frames_sent += o.frames_sent;
    frames_received += o.frames_received;
    frames_dropped += o.frames_dropped;
    malformed += o.malformed;
    checksum_failures += o.checksum_failures;
    connects += o.connects;
    disconnects += o.disconnects;
    return *this;
}

frame handshake_state::hello_frame(const handshake_options& opt) {
    return frame{control_kind::hello, opt.hello};
}

status handshake_state::deadline_error(const std::string& peer_name) const {
    return make_error(error_code::deadline_exceeded,
                      fmt::format("handshake with {} did not finish within {} ms", peer_name,
                                  opt_->timeout_ms));
}

handshake_state::step handshake_state::on_frame(const frame& f) {
    step s;
    const bool was_ready = ready();
    switch (f.kind) {
        case control_kind::hello: {
            if (got_hello_) {
                s.failure = make_error(error_code::data_loss, "peer sent a second HELLO");
                return s;
            }
            status st = opt_->check ? opt_->check(f.payload) : status::ok();
            if (!st.is_ok()) {
                s.reply = frame{control_kind::refuse, encode_reason(st.message())};
                s.failure = st.with_context("refused the peer");
                return s;
            }
            got_hello_ = true;
            s.reply = frame{control_kind::hello_ack, {}};
            break;
        }
        case control_kind::hello_ack:
            got_ack_ = true;
            break;
        case control_kind::refuse: {
            auto reason = decode_reason(f.payload);
            s.failure = make_error(error_code::invalid_argument,
                                   "the peer refused the handshake: " +
                                       (reason ? *reason : std::string("(unreadable reason)")));
            return s;
        }
        case control_kind::ping:
            s.reply = frame{control_kind::pong, f.payload};
            s.heartbeat = true;
            return s;
        case control_kind::pong:
            s.heartbeat = true;
            s.answered = true;
            return s;
        default:
            if (f.kind < control_kind::first_protocol_kind || !ready()) {
                s.dropped = true;
            } else {
                s.deliver = true;
            }
            return s;
    }
    s.became_ready = !was_ready && ready();
    return s;
}

void handshake_state::log_dropped(const frame& f, const std::string& peer_name,
                                  log_limiter& limit, int64_t now_ms) const {
    int64_t held_back = 0;
    if (!limit.allow(now_ms, &held_back)) return;
    TANDEM_LOG_WARN("transport dropped a frame of kind {} from {}: {}{}", f.kind, peer_name,
                    f.kind < control_kind::first_protocol_kind ? "an unknown control kind"
                                                               : "the handshake has not finished",
                    held_back > 0 ? fmt::format(" ({} more dropped frames not logged)", held_back)
                                  : std::string());
}

}  // namespace tandem::transport
