// topo/pd_endpoint.cpp — Typed dispatch of pd messages, counting what is dropped.
#include "topo/pd_endpoint.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/liveness.h"
#include "core/log.h"

namespace tandem::topo {

pd_endpoint::pd_endpoint(pd_role role, const cache::layout_spec& layout, model_identity model)
    : hello_(make_hello(role, layout, std::move(model))) {}

transport::handshake_options pd_endpoint::handshake(int64_t timeout_ms) const {
    transport::handshake_options h;
    h.hello = encode_message(hello_).payload;
    h.check = [mine = hello_](std::span<const std::byte> peer) { return check_peer_hello(mine, peer); };
    h.timeout_ms = timeout_ms;
    return h;
}

transport::transport_events pd_endpoint::events(pd_handlers h) {
    auto shared = std::make_shared<pd_handlers>(std::move(h));
    transport::transport_events e;
    e.on_peer_ready = [shared](transport::peer_id p, const std::string& name) {
        if (shared->on_peer_ready) shared->on_peer_ready(p, name);
    };
    e.on_peer_lost = [shared](transport::peer_id p, const status& why) {
        if (shared->on_peer_lost) shared->on_peer_lost(p, why);
    };
    e.on_frame = [this, shared](transport::peer_id p, transport::frame&& f) {
        dispatch(*shared, p, std::move(f));
    };
    return e;
}

namespace {

// Calls `fn` when this role receives messages of this type and a handler is set.
template <typename M>
bool deliver(bool role_receives, const std::function<void(transport::peer_id, M&&)>& fn,
             transport::peer_id p, pd_message& m) {
    if (!role_receives || !fn) return false;
    fn(p, std::move(std::get<M>(m)));
    return true;
}

}  // namespace

std::string pd_kind_slot_label(size_t slot) {
    if (slot + 1 >= k_pd_kind_slots) return "other";
    const char* name = pd_kind_name(static_cast<uint16_t>(slot));
    return std::string_view(name) == "unknown" ? std::to_string(slot) : std::string(name);
}

void pd_endpoint::count_dropped(transport::peer_id peer, uint16_t kind, std::string_view why) {
    dropped_by_kind_[std::min<size_t>(kind, k_pd_kind_slots - 1)].fetch_add(1);
    int64_t held_back = 0;
    if (!drop_log_.allow(monotonic_ms(), &held_back)) return;
    TANDEM_LOG_WARN("pd {} side dropped a frame of kind {} ({}) from peer {}: {}{}",
                    pd_role_name(hello_.role), kind, pd_kind_name(kind), peer, why,
                    held_back > 0 ? fmt::format(" ({} more dropped frames not logged)", held_back)
                                  : std::string());
}

void pd_endpoint::dispatch(const pd_handlers& h, transport::peer_id p, transport::frame&& f) {
    auto decoded = decode_message(f.kind, f.payload);
    if (!decoded) {
        malformed_.fetch_add(1);
        count_dropped(p, f.kind, decoded.error().message());
        return;
    }
    pd_message& m = *decoded;
    const bool decode = hello_.role == pd_role::decode;
    bool ok = false;
    switch (static_cast<pd_kind>(f.kind)) {
        case pd_kind::prefill_job: ok = deliver(!decode, h.on_job, p, m); break;
        case pd_kind::page_write: ok = deliver(decode, h.on_page_write, p, m); break;
        case pd_kind::page_span: ok = deliver(decode, h.on_page_span, p, m); break;
        case pd_kind::page_buffer: ok = deliver(decode, h.on_page_buffer, p, m); break;
        case pd_kind::spans_released: ok = deliver(!decode, h.on_spans_released, p, m); break;
        case pd_kind::state_write: ok = deliver(decode, h.on_state_write, p, m); break;
        case pd_kind::prefill_done: ok = deliver(decode, h.on_done, p, m); break;
        case pd_kind::prefill_failed: ok = deliver(decode, h.on_failed, p, m); break;
        case pd_kind::abort: ok = deliver(true, h.on_abort, p, m); break;
        case pd_kind::abort_ack: ok = deliver(true, h.on_abort_ack, p, m); break;
        default: break;  // control kinds never reach here; the transport consumes them
    }
    if (ok) {
        messages_.fetch_add(1);
        return;
    }
    unexpected_.fetch_add(1);
    count_dropped(p, f.kind, fmt::format("the {} side does not take this message",
                                         pd_role_name(hello_.role)));
}

pd_counters pd_endpoint::counters() const {
    pd_counters c{messages_.load(), malformed_.load(), unexpected_.load(), {}};
    for (size_t k = 0; k < k_pd_kind_slots; ++k) c.dropped_by_kind[k] = dropped_by_kind_[k].load();
    return c;
}

}  // namespace tandem::topo
