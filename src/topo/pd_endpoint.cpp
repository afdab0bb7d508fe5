// topo/pd_endpoint.cpp — Typed dispatch of pd messages, counting what is dropped.
#include "topo/pd_endpoint.h"

#include <memory>

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

void pd_endpoint::dispatch(const pd_handlers& h, transport::peer_id p, transport::frame&& f) {
    auto decoded = decode_message(f.kind, f.payload);
    if (!decoded) {
        malformed_.fetch_add(1);
        return;
    }
    pd_message& m = *decoded;
    const bool decode = hello_.role == pd_role::decode;
    bool ok = false;
    switch (static_cast<pd_kind>(f.kind)) {
        case pd_kind::prefill_job: ok = deliver(!decode, h.on_job, p, m); break;
        case pd_kind::page_write: ok = deliver(decode, h.on_page_write, p, m); break;
        case pd_kind::state_write: ok = deliver(decode, h.on_state_write, p, m); break;
        case pd_kind::prefill_done: ok = deliver(decode, h.on_done, p, m); break;
        case pd_kind::prefill_failed: ok = deliver(decode, h.on_failed, p, m); break;
        case pd_kind::abort: ok = deliver(true, h.on_abort, p, m); break;
        case pd_kind::abort_ack: ok = deliver(true, h.on_abort_ack, p, m); break;
        default: break;  // control kinds never reach here; the transport consumes them
    }
    (ok ? messages_ : unexpected_).fetch_add(1);
}

pd_counters pd_endpoint::counters() const {
    return {messages_.load(), malformed_.load(), unexpected_.load()};
}

}  // namespace tandem::topo
