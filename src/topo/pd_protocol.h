// topo/pd_protocol.h — The decode-driven prefill/decode protocol: message structs and their
// versioned wire encoding (design.md "One request, pd topology").
//
// Owns: what each message means, its payload encoding, and the HELLO check (version, roles,
// layout fingerprint). Framing and the control exchange (HELLO/HELLO_ACK/REFUSE/PING/PONG) are
// carried by transport/ (frame.h); this header gives their payloads meaning.
//
// Decoding is a pure function that never trusts its input (design invariant 5): an unknown kind,
// a short or over-long payload, an out-of-range enum, a hostile count or trailing bytes all give
// an error value (data_loss) the caller counts and drops. Nothing here allocates more than the
// payload could hold.
//
// Flow: decode → PREFILL_JOB → prefill; prefill → PAGE_WRITE* STATE_WRITE* PREFILL_DONE (or
// PREFILL_FAILED); either side → ABORT; the prefill side answers ABORT_ACK once no write for the
// request can follow. Deadlines travel as "milliseconds left" because peers' clocks differ.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "core/status.h"
#include "transport/frame.h"

namespace tandem::topo {

// 2: prefill_sampling carries the output grammar (constrained decoding).
inline constexpr uint16_t k_pd_protocol_version = 2;

enum class pd_kind : uint16_t {
    hello = transport::control_kind::hello,
    hello_ack = transport::control_kind::hello_ack,
    refuse = transport::control_kind::refuse,
    ping = transport::control_kind::ping,
    pong = transport::control_kind::pong,
    prefill_job = 16,
    page_write = 17,
    state_write = 18,
    prefill_done = 19,
    abort = 20,
    abort_ack = 21,
    prefill_failed = 22,
    page_span = 23,      // pd on one device: a PAGE_WRITE naming its source bytes (never on tcp)
    spans_released = 24,
    page_buffer = 25,    // transport.kind = "nccl": a PAGE_WRITE whose bytes follow on the buffer channel
};
const char* pd_kind_name(uint16_t kind);  // "unknown" for kinds outside the enum

enum class pd_role : uint8_t { prefill = 1, decode = 2 };
const char* pd_role_name(pd_role r);

// Which model a peer serves: two engines with one layout but different weights or numerics would
// hand each other state that decodes into wrong tokens, silently.
struct model_identity {
    uint64_t fingerprint = 0;
    std::string description;  // for mismatch errors
};

struct hello_msg {
    uint16_t protocol_version = k_pd_protocol_version;
    pd_role role = pd_role::decode;
    uint64_t layout_fingerprint = 0;
    std::string layout_description;  // layout_spec::describe(): for mismatch errors
    model_identity model;
};
struct hello_ack_msg {};
struct refuse_msg { std::string reason; };
struct ping_msg { uint64_t nonce = 0; };
struct pong_msg { uint64_t nonce = 0; };

// What prefill needs to sample the first token exactly as single topology would: the full
// sampling parameters (doubles, as the engine holds them: a float round trip could move a top_p
// boundary) and the seed the decode side resolved at submit, so prefill and decode draw from the
// same stream. Stop conditions stay on the decode side, which commits the first token.
struct prefill_sampling {
    double temperature = 0.0;          // 0 = greedy
    double top_p = 1.0;                // (0, 1]
    int32_t top_k = 0;                 // 0 = off
    double min_p = 0.0;                // [0, 1]
    double repetition_penalty = 1.0;   // > 0
    double presence_penalty = 0.0;
    double frequency_penalty = 0.0;
    uint64_t seed = 0;
    int32_t logprobs = -1;             // -1: none; 0: the chosen token's; k: plus the top k
    bool prompt_logprobs = false;      // score every prompt position (echo)
    // The output grammar (a structural tag, grammar/grammar.h); empty: unconstrained. The
    // prefill engine compiles it against its own vocabulary and samples the first token under it.
    std::string grammar;
};
inline constexpr int32_t k_max_top_logprobs = 64;

struct prefill_job_msg {
    uint64_t request_id = 0;
    std::vector<int32_t> token_ids;
    prefill_sampling sampling;
    std::vector<cache::page_ref> pages;  // the decode pool's destination pages, in order
    cache::slot_ref slot;                // the decode pool's destination sequence slot
    int64_t deadline_ms = 0;             // milliseconds left when sent
};

// One (page, layer, buffer kind) span of history, in-band (tcp/inproc) with its checksum.
struct page_write_msg {
    uint64_t request_id = 0;
    cache::page_ref page;
    int32_t layer = 0;
    cache::buffer_kind kind = cache::buffer_kind::compressed_kv;
    uint64_t checksum = 0;  // XXH3-64 of data
    std::vector<std::byte> data;
};
// A PAGE_WRITE between two pools in the SAME device address space (pd with both engines' pools on
// one GPU, inproc): instead of carrying the bytes it names where they lie in the prefill pool —
// (pool, page, epoch, offset, length) — and the receiver copies them device to device. The
// checksum is the device XXH3 of the source bytes, computed where they lie; the receiver hashes
// the bytes where they landed, on the device, and compares. The prefill side holds the source page
// (a reference on it: never freed or reused) until the decode side sends SPANS_RELEASED for the
// request, loses the link, or the hold's lease runs out. Only an in-process link whose decode side
// was given the named pool accepts it: src_pool is a process-local identity, not an address.
struct page_span_msg {
    uint64_t request_id = 0;
    cache::page_ref page;  // destination (decode pool), as PAGE_WRITE
    int32_t layer = 0;
    cache::buffer_kind kind = cache::buffer_kind::compressed_kv;
    uint64_t checksum = 0;  // XXH3-64 of the source bytes
    uint64_t src_pool = 0;  // page_pool::id() of the prefill pool
    cache::page_ref src_page;
    int64_t src_offset = 0;  // from the prefill pool's arena base
    int64_t bytes = 0;
};
// transport.kind = "nccl": a PAGE_WRITE whose bytes travel on the buffer channel
// (transport/buffer_channel.h), posted by the sender just BEFORE this frame; the receiver posts
// exactly one receive (or discard, for a write it refuses) per PAGE_BUFFER, in frame order, then
// verifies the device XXH3 where the bytes landed. The source page is held as for PAGE_SPAN.
struct page_buffer_msg {
    uint64_t request_id = 0;
    cache::page_ref page;
    int32_t layer = 0;
    cache::buffer_kind kind = cache::buffer_kind::compressed_kv;
    uint64_t checksum = 0;  // XXH3-64 of the bytes, computed on the sender's device
    int64_t bytes = 0;
};
// Decode → prefill: no further copy out of this request's named source spans will be made (its
// transfer completed, failed or was aborted), so the prefill side may release their holds.
struct spans_released_msg { uint64_t request_id = 0; };
// One (slot, layer, state kind) region: window rows or compressor rings.
struct state_write_msg {
    uint64_t request_id = 0;
    cache::slot_ref slot;
    int32_t layer = 0;
    cache::state_kind kind = cache::state_kind::window;
    uint64_t checksum = 0;
    std::vector<std::byte> data;
};

struct token_logprob {
    int32_t token = 0;
    float logprob = 0.0f;
};
// One scored position: the token there and, when asked, the best alternatives.
struct scored_position {
    int32_t token = 0;
    float logprob = 0.0f;
    std::vector<token_logprob> top;
};
struct prefill_done_msg {
    uint64_t request_id = 0;
    int32_t first_token = 0;
    float first_logprob = 0.0f;
    std::vector<token_logprob> top_logprobs;
    uint32_t writes_sent = 0;
    uint64_t transfer_checksum = 0;  // see transfer_checksum() in pd_transfer.h
    // Only when the job asked for prompt logprobs: one per prompt position, [0] a placeholder.
    std::vector<scored_position> prompt_logprobs;
};

enum class abort_cause : uint8_t { client = 1, deadline = 2, shutdown = 3, error = 4 };
const char* abort_cause_name(abort_cause c);
struct abort_msg {
    uint64_t request_id = 0;
    abort_cause cause = abort_cause::client;
};
struct abort_ack_msg { uint64_t request_id = 0; };
struct prefill_failed_msg {
    uint64_t request_id = 0;
    std::string reason;
};

using pd_message = std::variant<hello_msg, hello_ack_msg, refuse_msg, ping_msg, pong_msg,
                                prefill_job_msg, page_write_msg, state_write_msg,
                                prefill_done_msg, abort_msg, abort_ack_msg, prefill_failed_msg,
                                page_span_msg, spans_released_msg, page_buffer_msg>;

// Limits the decoder enforces (beyond "fits in the payload").
inline constexpr size_t k_max_description_bytes = 4096;
inline constexpr uint32_t k_max_job_tokens = 1u << 24;
inline constexpr uint32_t k_max_job_pages = 1u << 20;

uint16_t kind_of(const pd_message& m);
transport::frame encode_message(const pd_message& m);
// data_loss naming the kind and what was wrong; never reads outside `payload`.
result<pd_message> decode_message(uint16_t kind, std::span<const std::byte> payload);

// The handshake: our HELLO, and the check of the peer's. A layout or model fingerprint mismatch
// names both layouts (models); a version mismatch names both versions; two peers of the same role are refused.
hello_msg make_hello(pd_role role, const cache::layout_spec& layout, model_identity model = {});
status check_peer_hello(const hello_msg& local, std::span<const std::byte> peer_payload);

}  // namespace tandem::topo
