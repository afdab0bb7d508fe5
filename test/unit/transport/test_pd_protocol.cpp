// Wire format of frames and pd messages: round trips, every rejection path, and a fuzz pass
// (random and mutated frames must give error values, never a crash or an over-read; run under
// -Db_sanitize=address,undefined to make over-reads fail loudly).
#include <doctest/doctest.h>

#include <random>

#include "cache/test_helpers.h"
#include "grammar/grammar.h"
#include "topo/pd_protocol.h"
#include "transport/frame.h"

using namespace tandem;
using namespace tandem::topo;
using transport::frame;
using transport::frame_error;

namespace {

prefill_job_msg sample_job() {
    prefill_job_msg j;
    j.request_id = 0x1234567890abcdefull;
    j.token_ids = {0, 1, 128000, 7};
    j.sampling.temperature = 0.7;
    j.sampling.top_p = 0.9;
    j.sampling.top_k = 40;
    j.sampling.min_p = 0.05;
    j.sampling.repetition_penalty = 1.1;
    j.sampling.presence_penalty = -0.5;
    j.sampling.frequency_penalty = 0.25;
    j.sampling.seed = 99;
    j.sampling.logprobs = 5;
    j.sampling.prompt_logprobs = true;
    j.sampling.grammar = R"({"type":"structural_tag","format":{"type":"const_string","value":"ok"}})";
    j.pages = {{3, 7}, {9, 1}};
    j.slot = {2, 5};
    j.deadline_ms = 30000;
    return j;
}

std::vector<pd_message> sample_messages() {
    page_write_msg pw;
    pw.request_id = 5;
    pw.page = {11, 42};
    pw.layer = 3;
    pw.kind = cache::buffer_kind::index_k;
    pw.checksum = 0xfeedull;
    pw.data = std::vector<std::byte>(100, std::byte{0x5a});
    state_write_msg sw;
    sw.request_id = 5;
    sw.slot = {1, 9};
    sw.layer = 2;
    sw.kind = cache::state_kind::attn_compressor;
    sw.data = {std::byte{1}, std::byte{2}};
    prefill_done_msg done;
    done.request_id = 5;
    done.first_token = 17;
    done.first_logprob = -0.25f;
    done.top_logprobs = {{17, -0.25f}, {3, -2.0f}};
    done.prompt_logprobs = {{4, 0.0f, {}}, {8, -1.5f, {{8, -1.5f}, {2, -3.0f}}}};
    done.writes_sent = 12;
    done.transfer_checksum = 0xabcdef;
    hello_msg h;
    h.role = pd_role::prefill;
    h.layout_fingerprint = 77;
    h.layout_description = "kv fp8, index_k bf16, page 256";
    return {h, hello_ack_msg{}, refuse_msg{"nope"}, ping_msg{1}, pong_msg{2}, sample_job(), pw, sw,
            done, abort_msg{5, abort_cause::deadline}, abort_ack_msg{5},
            prefill_failed_msg{5, "out of pages"}};
}

// Decodes a whole encoded frame and then its message, as a receiver does.
result<pd_message> receive(std::span<const std::byte> bytes) {
    auto d = transport::decode_frame(bytes, transport::k_default_max_payload);
    if (d.error != frame_error::none) {
        return make_error(error_code::data_loss, transport::frame_error_name(d.error));
    }
    return decode_message(d.frame.kind, d.frame.payload);
}

}  // namespace

TEST_CASE("pd_protocol: every message round-trips through a frame") {
    for (const pd_message& m : sample_messages()) {
        frame f = encode_message(m);
        auto bytes = transport::encode_frame(f);
        auto back = receive(bytes);
        REQUIRE_MESSAGE(back.is_ok(), back.error().message());
        CHECK(back->index() == m.index());
        // Re-encoding the decoded message gives the same bytes: every field survived.
        CHECK(transport::encode_frame(encode_message(*back)) == bytes);
    }
    auto job = std::get<prefill_job_msg>(*receive(transport::encode_frame(encode_message(sample_job()))));
    CHECK(job.token_ids == sample_job().token_ids);
    CHECK(job.pages[1] == cache::page_ref{9, 1});
    CHECK(job.slot == cache::slot_ref{2, 5});
    CHECK(job.sampling.top_k == 40);
    CHECK(job.sampling.seed == 99);
    CHECK(job.sampling.top_p == 0.9);  // doubles travel exactly
    CHECK(job.sampling.repetition_penalty == 1.1);
    CHECK(job.sampling.logprobs == 5);
    CHECK(job.sampling.prompt_logprobs);
    CHECK(job.sampling.grammar == sample_job().sampling.grammar);
}

TEST_CASE("pd_protocol: the decoder rejects unknown kinds, truncation, trailing bytes, bad enums") {
    CHECK_FALSE(decode_message(999, {}).is_ok());
    frame f = encode_message(sample_job());
    for (size_t cut = 0; cut < f.payload.size(); ++cut) {
        CHECK_FALSE(decode_message(f.kind, std::span(f.payload).first(cut)).is_ok());
    }
    auto longer = f.payload;
    longer.push_back(std::byte{0});
    auto r = decode_message(f.kind, longer);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().message().find("trailing") != std::string::npos);

    frame a = encode_message(abort_msg{1, abort_cause::client});
    a.payload.back() = std::byte{9};  // cause 9 does not exist
    CHECK_FALSE(decode_message(a.kind, a.payload).is_ok());

    prefill_job_msg bad = sample_job();
    bad.sampling.top_p = 0.0;
    frame b = encode_message(bad);
    CHECK_FALSE(decode_message(b.kind, b.payload).is_ok());
    bad = sample_job();
    bad.sampling.temperature = std::nan("");
    b = encode_message(bad);
    CHECK_FALSE(decode_message(b.kind, b.payload).is_ok());
    bad = sample_job();
    bad.sampling.logprobs = k_max_top_logprobs + 1;
    b = encode_message(bad);
    CHECK_FALSE(decode_message(b.kind, b.payload).is_ok());
    bad = sample_job();
    bad.sampling.repetition_penalty = 0.0;
    b = encode_message(bad);
    CHECK_FALSE(decode_message(b.kind, b.payload).is_ok());
    bad = sample_job();
    bad.sampling.grammar.assign(grammar::k_max_spec_bytes + 1, 'x');  // over the spec limit
    b = encode_message(bad);
    CHECK_FALSE(decode_message(b.kind, b.payload).is_ok());
}

TEST_CASE("pd_protocol: a hostile count is refused without allocating it") {
    frame f = encode_message(sample_job());
    // The token count sits right after the request id: claim 2^24 tokens in a tiny payload.
    f.payload[8] = std::byte{0};
    f.payload[9] = std::byte{0};
    f.payload[10] = std::byte{0};
    f.payload[11] = std::byte{1};
    CHECK_FALSE(decode_message(f.kind, f.payload).is_ok());
}

TEST_CASE("frame: header and payload corruption are told apart") {
    frame f = encode_message(ping_msg{42});
    auto bytes = transport::encode_frame(f);
    auto ok = transport::decode_frame(bytes, 1024);
    CHECK(ok.error == frame_error::none);
    CHECK(ok.consumed == static_cast<int64_t>(bytes.size()));

    auto payload_flip = bytes;
    payload_flip[transport::k_frame_header_bytes] ^= std::byte{1};
    auto d = transport::decode_frame(payload_flip, 1024);
    CHECK(d.error == frame_error::bad_payload_checksum);
    CHECK(d.consumed == static_cast<int64_t>(bytes.size()));  // stream stays in sync

    auto len_flip = bytes;
    len_flip[8] ^= std::byte{0x10};
    CHECK(transport::decode_frame(len_flip, 1024).error == frame_error::bad_header_check);
    auto magic_flip = bytes;
    magic_flip[0] ^= std::byte{1};
    CHECK(transport::decode_frame(std::span(magic_flip).first(2), 1024).error ==
          frame_error::bad_magic);  // garbage fails before a whole header arrived
    CHECK(transport::decode_frame(std::span(bytes).first(10), 1024).error ==
          frame_error::need_more);
    CHECK(transport::decode_frame(bytes, 4).error == frame_error::too_large);
}

TEST_CASE("frame_reader: frames split at every byte boundary reassemble; a bad one is skipped") {
    std::vector<std::byte> stream;
    for (uint64_t i = 0; i < 5; ++i) {
        frame f = encode_message(ping_msg{i});
        transport::encode_frame(f.kind, f.payload, stream);
    }
    const size_t one = stream.size() / 5;
    stream[one * 2 + transport::k_frame_header_bytes] ^= std::byte{0xff};  // corrupt frame 2
    for (size_t piece : {size_t{1}, size_t{3}, size_t{17}, stream.size()}) {
        transport::frame_reader rd(1024);
        std::vector<uint64_t> got;
        int dropped = 0;
        for (size_t at = 0; at < stream.size(); at += piece) {
            rd.feed(std::span(stream).subspan(at, std::min(piece, stream.size() - at)));
            frame f;
            for (;;) {
                frame_error e = rd.next(f);
                if (e == frame_error::need_more) break;
                REQUIRE_FALSE(transport::frame_error_is_fatal(e));
                if (e == frame_error::bad_payload_checksum) { ++dropped; continue; }
                got.push_back(std::get<ping_msg>(*decode_message(f.kind, f.payload)).nonce);
            }
        }
        CHECK(got == std::vector<uint64_t>{0, 1, 3, 4});
        CHECK(dropped == 1);
        CHECK(rd.buffered() == 0);
    }
}

TEST_CASE("pd_protocol: fuzzed frames give error values, never a crash") {
    std::mt19937_64 rng(12345);
    auto msgs = sample_messages();
    int decoded = 0, rejected = 0;
    for (int iter = 0; iter < 4000; ++iter) {
        std::vector<std::byte> bytes;
        if (iter % 4 == 0) {  // pure noise, sometimes behind a valid header
            bytes.resize(rng() % 200);
            for (auto& b : bytes) b = static_cast<std::byte>(rng());
        } else {  // a valid frame with a few bytes mutated, truncated or extended
            bytes = transport::encode_frame(encode_message(msgs[rng() % msgs.size()]));
            const int flips = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= static_cast<std::byte>(1 + rng() % 255);
            if (rng() % 3 == 0) bytes.resize(rng() % (bytes.size() + 1));
        }
        auto r = receive(bytes);
        (r.is_ok() ? decoded : rejected)++;
        // The payload decoder alone, fed the mutated bytes as a payload of every kind.
        for (uint16_t kind = 0; kind < 24; ++kind) (void)decode_message(kind, bytes);
    }
    CHECK(rejected > 3500);  // a mutation almost never survives two checksums
    CHECK(decoded + rejected == 4000);
}

TEST_CASE("pd handshake: a layout mismatch is refused naming both layouts") {
    auto model = cache::testing::load_model("tiny-ci-native.json");
    auto prefill_layout = cache::testing::make_layout(model, cache::kv_dtype::fp8, cache::index_k_dtype::bf16);
    auto decode_layout = cache::testing::make_layout(model, cache::kv_dtype::fp8, cache::index_k_dtype::fp8);
    hello_msg decode_hello = make_hello(pd_role::decode, decode_layout);
    frame peer = encode_message(make_hello(pd_role::prefill, prefill_layout));
    status st = check_peer_hello(decode_hello, peer.payload);
    REQUIRE_FALSE(st.is_ok());
    const std::string& msg = st.message();
    CHECK(msg.find("layout mismatch: prefill has") != std::string::npos);
    CHECK(msg.find(prefill_layout.describe()) != std::string::npos);
    CHECK(msg.find("but decode has " + decode_layout.describe()) != std::string::npos);
    CHECK(msg.find(prefill_layout.fingerprint_hex()) != std::string::npos);
    CHECK(msg.find(decode_layout.fingerprint_hex()) != std::string::npos);

    frame same = encode_message(make_hello(pd_role::prefill, decode_layout));
    CHECK(check_peer_hello(decode_hello, same.payload).is_ok());
    frame twin = encode_message(make_hello(pd_role::decode, decode_layout));
    CHECK_FALSE(check_peer_hello(decode_hello, twin.payload).is_ok());
    hello_msg old = make_hello(pd_role::prefill, decode_layout);
    old.protocol_version = 0;
    st = check_peer_hello(decode_hello, encode_message(old).payload);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("version mismatch") != std::string::npos);

    // Same layout, different weights: refused, naming both models.
    hello_msg a = make_hello(pd_role::decode, decode_layout, {0x1111, "models/a (1 safetensors file, numerics hf)"});
    frame b = encode_message(make_hello(pd_role::prefill, decode_layout, {0x2222, "models/b (1 safetensors file, numerics hf)"}));
    st = check_peer_hello(a, b.payload);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("model mismatch: prefill serves models/b") != std::string::npos);
    CHECK(st.message().find("but decode serves models/a") != std::string::npos);
}
