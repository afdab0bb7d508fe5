// topo/pd_protocol.cpp — Payload encoding of every pd message and the HELLO check.
#include "topo/pd_protocol.h"

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "transport/wire.h"

namespace tandem::topo {

using transport::wire_reader;
using transport::wire_writer;

const char* pd_kind_name(uint16_t kind) {
    switch (static_cast<pd_kind>(kind)) {
        case pd_kind::hello: return "HELLO";
        case pd_kind::hello_ack: return "HELLO_ACK";
        case pd_kind::refuse: return "REFUSE";
        case pd_kind::ping: return "PING";
        case pd_kind::pong: return "PONG";
        case pd_kind::prefill_job: return "PREFILL_JOB";
        case pd_kind::page_write: return "PAGE_WRITE";
        case pd_kind::state_write: return "STATE_WRITE";
        case pd_kind::prefill_done: return "PREFILL_DONE";
        case pd_kind::abort: return "ABORT";
        case pd_kind::abort_ack: return "ABORT_ACK";
        case pd_kind::prefill_failed: return "PREFILL_FAILED";
        case pd_kind::page_span: return "PAGE_SPAN";
        case pd_kind::spans_released: return "SPANS_RELEASED";
        case pd_kind::page_buffer: return "PAGE_BUFFER";
    }
    return "unknown";
}

const char* pd_role_name(pd_role r) { return r == pd_role::prefill ? "prefill" : "decode"; }

const char* abort_cause_name(abort_cause c) {
    switch (c) {
        case abort_cause::client: return "client";
        case abort_cause::deadline: return "deadline";
        case abort_cause::shutdown: return "shutdown";
        case abort_cause::error: return "error";
    }
    return "unknown";
}

// ------------------------------------------------------------------------------------------------
// Encoding: one function per message, fields in declaration order.

namespace {

void put(wire_writer& w, const hello_msg& m) {
    w.u16(m.protocol_version);
    w.u8(static_cast<uint8_t>(m.role));
    w.u64(m.layout_fingerprint);
    w.str(m.layout_description.substr(0, k_max_description_bytes));
    w.u64(m.model.fingerprint);
    w.str(m.model.description.substr(0, k_max_description_bytes));
}
void put(wire_writer&, const hello_ack_msg&) {}
void put(wire_writer& w, const refuse_msg& m) {
    w.str(m.reason.substr(0, transport::k_max_reason_bytes));
}
void put(wire_writer& w, const ping_msg& m) { w.u64(m.nonce); }
void put(wire_writer& w, const pong_msg& m) { w.u64(m.nonce); }
void put(wire_writer& w, const prefill_sampling& s) {
    w.f64(s.temperature);
    w.f64(s.top_p);
    w.i32(s.top_k);
    w.f64(s.min_p);
    w.f64(s.repetition_penalty);
    w.f64(s.presence_penalty);
    w.f64(s.frequency_penalty);
    w.u64(s.seed);
    w.i32(s.logprobs);
    w.u8(s.prompt_logprobs ? 1 : 0);
    w.str(s.grammar);
}
void put(wire_writer& w, const token_logprob& t) { w.i32(t.token); w.f32(t.logprob); }
void put(wire_writer& w, const scored_position& p) {
    put(w, token_logprob{p.token, p.logprob});
    w.u32(static_cast<uint32_t>(p.top.size()));
    for (const token_logprob& t : p.top) put(w, t);
}
void put(wire_writer& w, const prefill_job_msg& m) {
    w.u64(m.request_id);
    w.u32(static_cast<uint32_t>(m.token_ids.size()));
    for (int32_t t : m.token_ids) w.i32(t);
    put(w, m.sampling);
    w.u32(static_cast<uint32_t>(m.pages.size()));
    for (const cache::page_ref& p : m.pages) { w.i32(p.page); w.u32(p.epoch); }
    w.i32(m.slot.slot);
    w.u32(m.slot.epoch);
    w.i64(m.deadline_ms);
}
// PAGE_WRITE, PAGE_SPAN and PAGE_BUFFER open with the same destination header.
template <typename M> void put_page_head(wire_writer& w, const M& m) {
    w.u64(m.request_id);
    w.i32(m.page.page);
    w.u32(m.page.epoch);
    w.i32(m.layer);
    w.u8(static_cast<uint8_t>(m.kind));
    w.u64(m.checksum);
}
void put(wire_writer& w, const page_write_msg& m) {
    put_page_head(w, m);
    w.bytes(m.data);
}
void put(wire_writer& w, const page_span_msg& m) {
    put_page_head(w, m);
    w.u64(m.src_pool);
    w.i32(m.src_page.page);
    w.u32(m.src_page.epoch);
    w.i64(m.src_offset);
    w.i64(m.bytes);
}
void put(wire_writer& w, const spans_released_msg& m) { w.u64(m.request_id); }
void put(wire_writer& w, const page_buffer_msg& m) {
    put_page_head(w, m);
    w.i64(m.bytes);
}
void put(wire_writer& w, const state_write_msg& m) {
    w.u64(m.request_id);
    w.i32(m.slot.slot);
    w.u32(m.slot.epoch);
    w.i32(m.layer);
    w.u8(static_cast<uint8_t>(m.kind));
    w.u64(m.checksum);
    w.bytes(m.data);
}
void put(wire_writer& w, const prefill_done_msg& m) {
    w.u64(m.request_id);
    w.i32(m.first_token);
    w.f32(m.first_logprob);
    w.u32(static_cast<uint32_t>(m.top_logprobs.size()));
    for (const token_logprob& t : m.top_logprobs) put(w, t);
    w.u32(m.writes_sent);
    w.u64(m.transfer_checksum);
    w.u32(static_cast<uint32_t>(m.prompt_logprobs.size()));
    for (const scored_position& p : m.prompt_logprobs) put(w, p);
}
void put(wire_writer& w, const abort_msg& m) { w.u64(m.request_id); w.u8(static_cast<uint8_t>(m.cause)); }
void put(wire_writer& w, const abort_ack_msg& m) { w.u64(m.request_id); }
void put(wire_writer& w, const prefill_failed_msg& m) {
    w.u64(m.request_id);
    w.str(m.reason.substr(0, transport::k_max_reason_bytes));
}

template <typename T> constexpr pd_kind kind_for();
template <> constexpr pd_kind kind_for<hello_msg>() { return pd_kind::hello; }
template <> constexpr pd_kind kind_for<hello_ack_msg>() { return pd_kind::hello_ack; }
template <> constexpr pd_kind kind_for<refuse_msg>() { return pd_kind::refuse; }
template <> constexpr pd_kind kind_for<ping_msg>() { return pd_kind::ping; }
template <> constexpr pd_kind kind_for<pong_msg>() { return pd_kind::pong; }
template <> constexpr pd_kind kind_for<prefill_job_msg>() { return pd_kind::prefill_job; }
template <> constexpr pd_kind kind_for<page_write_msg>() { return pd_kind::page_write; }
template <> constexpr pd_kind kind_for<state_write_msg>() { return pd_kind::state_write; }
template <> constexpr pd_kind kind_for<prefill_done_msg>() { return pd_kind::prefill_done; }
template <> constexpr pd_kind kind_for<abort_msg>() { return pd_kind::abort; }
template <> constexpr pd_kind kind_for<abort_ack_msg>() { return pd_kind::abort_ack; }
template <> constexpr pd_kind kind_for<prefill_failed_msg>() { return pd_kind::prefill_failed; }
template <> constexpr pd_kind kind_for<page_span_msg>() { return pd_kind::page_span; }
template <> constexpr pd_kind kind_for<spans_released_msg>() { return pd_kind::spans_released; }
template <> constexpr pd_kind kind_for<page_buffer_msg>() { return pd_kind::page_buffer; }

}  // namespace

uint16_t kind_of(const pd_message& m) {
    return std::visit([](const auto& v) {
        return static_cast<uint16_t>(kind_for<std::decay_t<decltype(v)>>());
    }, m);
}

transport::frame encode_message(const pd_message& m) {
    transport::frame f;
    f.kind = kind_of(m);
    wire_writer w(f.payload);
    std::visit([&](const auto& v) { put(w, v); }, m);
    return f;
}

// ------------------------------------------------------------------------------------------------
// Decoding: read every field, then validate once; the reader is sticky so a short payload
// simply fails ok().

namespace {


bool get(wire_reader& r, hello_msg& m) {
    m.protocol_version = r.u16();
    const uint8_t role = r.u8();
    m.role = static_cast<pd_role>(role);
    m.layout_fingerprint = r.u64();
    m.layout_description = r.str(k_max_description_bytes);
    m.model.fingerprint = r.u64();
    m.model.description = r.str(k_max_description_bytes);
    return role == 1 || role == 2;
}
bool get(wire_reader&, hello_ack_msg&) { return true; }
bool get(wire_reader& r, refuse_msg& m) { m.reason = r.str(transport::k_max_reason_bytes); return true; }
bool get(wire_reader& r, ping_msg& m) { m.nonce = r.u64(); return true; }
bool get(wire_reader& r, pong_msg& m) { m.nonce = r.u64(); return true; }

bool finite_in(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; }

bool get(wire_reader& r, prefill_sampling& s) {
    s.temperature = r.f64();
    s.top_p = r.f64();
    s.top_k = r.i32();
    s.min_p = r.f64();
    s.repetition_penalty = r.f64();
    s.presence_penalty = r.f64();
    s.frequency_penalty = r.f64();
    s.seed = r.u64();
    s.logprobs = r.i32();
    const uint8_t prompt_logprobs = r.u8();
    s.prompt_logprobs = prompt_logprobs == 1;
    s.grammar = r.str(grammar::k_max_spec_bytes);
    return prompt_logprobs <= 1 && finite_in(s.temperature, 0.0, 1e6) &&
           std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0 && s.top_k >= 0 &&
           finite_in(s.min_p, 0.0, 1.0) && std::isfinite(s.repetition_penalty) &&
           s.repetition_penalty > 0.0 && std::isfinite(s.presence_penalty) &&
           std::isfinite(s.frequency_penalty) && s.logprobs >= -1 &&
           s.logprobs <= k_max_top_logprobs;
}
bool get(wire_reader& r, token_logprob& t) {
    t.token = r.i32();
    t.logprob = r.f32();
    return t.token >= 0 && !std::isnan(t.logprob);
}
bool get(wire_reader& r, scored_position& p) {
    token_logprob head;
    bool ok = get(r, head);
    p.token = head.token;
    p.logprob = head.logprob;
    p.top.resize(r.count(8, static_cast<size_t>(k_max_top_logprobs)));
    for (token_logprob& t : p.top) ok = get(r, t) && ok;
    return ok;
}
bool get(wire_reader& r, prefill_job_msg& m) {
    m.request_id = r.u64();
    const uint32_t n = r.count(4, k_max_job_tokens);
    m.token_ids.resize(n);
    bool ok = true;
    for (int32_t& t : m.token_ids) { t = r.i32(); ok = ok && t >= 0; }
    ok = get(r, m.sampling) && ok;
    const uint32_t np = r.count(8, k_max_job_pages);
    m.pages.resize(np);
    for (cache::page_ref& p : m.pages) { p.page = r.i32(); p.epoch = r.u32(); ok = ok && p.page >= 0; }
    m.slot.slot = r.i32();
    m.slot.epoch = r.u32();
    m.deadline_ms = r.i64();
    return ok && !m.token_ids.empty() && m.slot.slot >= 0 && m.deadline_ms > 0;
}
// The destination header put_page_head writes; false when it names no valid page, layer or kind.
template <typename M> bool get_page_head(wire_reader& r, M& m) {
    m.request_id = r.u64();
    m.page.page = r.i32();
    m.page.epoch = r.u32();
    m.layer = r.i32();
    const uint8_t kind = r.u8();
    m.kind = static_cast<cache::buffer_kind>(kind);
    m.checksum = r.u64();
    return m.page.page >= 0 && m.layer >= 0 && kind < cache::k_buffer_kinds;
}
bool get(wire_reader& r, page_write_msg& m) {
    const bool ok = get_page_head(r, m);
    auto d = r.bytes(SIZE_MAX);
    m.data.assign(d.begin(), d.end());
    return ok;
}
bool get(wire_reader& r, page_span_msg& m) {
    const bool ok = get_page_head(r, m);
    m.src_pool = r.u64();
    m.src_page.page = r.i32();
    m.src_page.epoch = r.u32();
    m.src_offset = r.i64();
    m.bytes = r.i64();
    return ok && m.src_page.page >= 0 && m.src_offset >= 0 && m.bytes >= 0;
}
bool get(wire_reader& r, spans_released_msg& m) { m.request_id = r.u64(); return true; }
bool get(wire_reader& r, page_buffer_msg& m) {
    const bool ok = get_page_head(r, m);
    m.bytes = r.i64();
    // A size no page buffer could have would desynchronise the channel: refuse it here.
    return ok && m.bytes >= 0 && m.bytes <= (int64_t{1} << 40);
}
bool get(wire_reader& r, state_write_msg& m) {
    m.request_id = r.u64();
    m.slot.slot = r.i32();
    m.slot.epoch = r.u32();
    m.layer = r.i32();
    const uint8_t kind = r.u8();
    m.kind = static_cast<cache::state_kind>(kind);
    m.checksum = r.u64();
    auto d = r.bytes(SIZE_MAX);
    m.data.assign(d.begin(), d.end());
    return m.slot.slot >= 0 && m.layer >= 0 && kind < cache::k_state_kinds;
}
bool get(wire_reader& r, prefill_done_msg& m) {
    m.request_id = r.u64();
    m.first_token = r.i32();
    m.first_logprob = r.f32();
    m.top_logprobs.resize(r.count(8, static_cast<size_t>(k_max_top_logprobs)));
    bool ok = true;
    for (token_logprob& t : m.top_logprobs) ok = get(r, t) && ok;
    m.writes_sent = r.u32();
    m.transfer_checksum = r.u64();
    // Each position is at least 12 bytes (token, logprob, count).
    m.prompt_logprobs.resize(r.count(12, k_max_job_tokens));
    for (scored_position& p : m.prompt_logprobs) ok = get(r, p) && ok;
    return ok && m.first_token >= 0 && !std::isnan(m.first_logprob);
}
bool get(wire_reader& r, abort_msg& m) {
    m.request_id = r.u64();
    const uint8_t c = r.u8();
    m.cause = static_cast<abort_cause>(c);
    return c >= 1 && c <= 4;
}
bool get(wire_reader& r, abort_ack_msg& m) { m.request_id = r.u64(); return true; }
bool get(wire_reader& r, prefill_failed_msg& m) {
    m.request_id = r.u64();
    m.reason = r.str(transport::k_max_reason_bytes);
    return true;
}

template <typename T>
result<pd_message> decode_as(uint16_t kind, std::span<const std::byte> payload) {
    wire_reader r(payload);
    T m;
    const bool fields_ok = get(r, m);
    if (!r.ok()) {
        return make_error(error_code::data_loss,
                          fmt::format("{} payload of {} bytes is truncated or has an over-long "
                                      "field", pd_kind_name(kind), payload.size()));
    }
    if (!fields_ok) {
        return make_error(error_code::data_loss,
                          fmt::format("{} payload has a field out of range", pd_kind_name(kind)));
    }
    if (!r.at_end()) {
        return make_error(error_code::data_loss,
                          fmt::format("{} payload has {} trailing bytes", pd_kind_name(kind),
                                      r.remaining()));
    }
    return pd_message(std::move(m));
}

}  // namespace

result<pd_message> decode_message(uint16_t kind, std::span<const std::byte> payload) {
    switch (static_cast<pd_kind>(kind)) {
        case pd_kind::hello: return decode_as<hello_msg>(kind, payload);
        case pd_kind::hello_ack: return decode_as<hello_ack_msg>(kind, payload);
        case pd_kind::refuse: return decode_as<refuse_msg>(kind, payload);
        case pd_kind::ping: return decode_as<ping_msg>(kind, payload);
        case pd_kind::pong: return decode_as<pong_msg>(kind, payload);
        case pd_kind::prefill_job: return decode_as<prefill_job_msg>(kind, payload);
        case pd_kind::page_write: return decode_as<page_write_msg>(kind, payload);
        case pd_kind::state_write: return decode_as<state_write_msg>(kind, payload);
        case pd_kind::prefill_done: return decode_as<prefill_done_msg>(kind, payload);
        case pd_kind::abort: return decode_as<abort_msg>(kind, payload);
        case pd_kind::abort_ack: return decode_as<abort_ack_msg>(kind, payload);
        case pd_kind::prefill_failed: return decode_as<prefill_failed_msg>(kind, payload);
        case pd_kind::page_span: return decode_as<page_span_msg>(kind, payload);
        case pd_kind::spans_released: return decode_as<spans_released_msg>(kind, payload);
        case pd_kind::page_buffer: return decode_as<page_buffer_msg>(kind, payload);
    }
    return make_error(error_code::data_loss, fmt::format("unknown message kind {}", kind));
}

// ------------------------------------------------------------------------------------------------

hello_msg make_hello(pd_role role, const cache::layout_spec& layout, model_identity model) {
    hello_msg h;
    h.role = role;
    h.model = std::move(model);
    h.layout_fingerprint = layout.fingerprint();
    h.layout_description = layout.describe();
    return h;
}

status check_peer_hello(const hello_msg& local, std::span<const std::byte> peer_payload) {
    auto decoded = decode_message(static_cast<uint16_t>(pd_kind::hello), peer_payload);
    if (!decoded) return decoded.error().with_context("peer HELLO");
    const hello_msg& peer = std::get<hello_msg>(*decoded);
    if (peer.protocol_version != local.protocol_version) {
        return make_error(error_code::invalid_argument,
                          fmt::format("pd protocol version mismatch: {} speaks {} but {} speaks {}",
                                      pd_role_name(peer.role), peer.protocol_version,
                                      pd_role_name(local.role), local.protocol_version));
    }
    if (peer.role == local.role) {
        return make_error(error_code::invalid_argument,
                          fmt::format("both peers have role {}; pd needs one prefill and one decode",
                                      pd_role_name(local.role)));
    }
    if (peer.layout_fingerprint != local.layout_fingerprint) {
        return make_error(error_code::invalid_argument,
                          fmt::format("layout mismatch: {} has {} (fp {:016x}) but {} has {} (fp {:016x})",
                                      pd_role_name(peer.role), peer.layout_description,
                                      peer.layout_fingerprint, pd_role_name(local.role),
                                      local.layout_description, local.layout_fingerprint));
    }
    if (peer.model.fingerprint != local.model.fingerprint) {
        return make_error(error_code::invalid_argument,
                          fmt::format("model mismatch: {} serves {} (fp {:016x}) but {} serves {} "
                                      "(fp {:016x})",
                                      pd_role_name(peer.role), peer.model.description,
                                      peer.model.fingerprint, pd_role_name(local.role),
                                      local.model.description, local.model.fingerprint));
    }
    return status::ok();
}

}  // namespace tandem::topo
