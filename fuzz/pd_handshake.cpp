// Fuzz target: the link handshake (transport/handshake.h) judging a peer with the pd HELLO check
// (topo::check_peer_hello). Input: records of kind (u16), length (one byte) and payload, played
// as the peer's frames into a decode side's handshake state. Properties: no crash; a failure is
// final (no protocol frame is delivered after it and it has a reason); protocol frames are
// delivered only once the link is ready (protocol kinds before it are dropped); ready never goes back; a HELLO the
// check accepts is answered with HELLO_ACK, one it refuses with REFUSE.
#include "fuzz_support.h"
#include "topo/pd_protocol.h"
#include "transport/handshake.h"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    topo::hello_msg mine;
    mine.role = topo::pd_role::decode;
    mine.layout_fingerprint = 0x5eed;
    mine.layout_description = "fuzz layout";
    mine.model = {0xfeed, "fuzz model"};
    transport::handshake_options opt;
    opt.hello = topo::encode_message(mine).payload;
    opt.check = [mine](std::span<const std::byte> peer) { return topo::check_peer_hello(mine, peer); };
    transport::handshake_state hs(opt, 0);

    fuzz::input_reader in(data, size);
    bool failed = false, was_ready = false;
    while (!in.empty() && !failed) {
        transport::frame f;
        f.kind = in.u16();
        std::string_view payload = in.take(in.byte());
        f.payload.assign(reinterpret_cast<const std::byte*>(payload.data()),
                         reinterpret_cast<const std::byte*>(payload.data() + payload.size()));
        bool ready_before = hs.ready();
        transport::handshake_state::step s = hs.on_frame(f);
        if (!s.failure.is_ok()) {
            failed = true;
            FUZZ_CHECK(!s.failure.message().empty());
            FUZZ_CHECK(!s.deliver);
        }
        if (s.deliver) FUZZ_CHECK(ready_before, "kind {} delivered before the handshake", f.kind);
        if (s.dropped && f.kind >= transport::control_kind::first_protocol_kind) FUZZ_CHECK(!ready_before);
        if (s.became_ready) FUZZ_CHECK(!ready_before && hs.ready());
        if (was_ready) FUZZ_CHECK(hs.ready(), "ready went back");
        was_ready = hs.ready();
        if (f.kind == transport::control_kind::hello && s.reply) {
            bool accepted = topo::check_peer_hello(mine, f.payload).is_ok();
            uint16_t want = accepted ? transport::control_kind::hello_ack : transport::control_kind::refuse;
            FUZZ_CHECK(s.reply->kind == want, "reply kind {} to a HELLO the check {}", s.reply->kind,
                       accepted ? "accepts" : "refuses");
        }
    }
    FUZZ_CHECK(!hs.expired(0));
    return 0;
}
