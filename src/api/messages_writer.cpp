#include "api/messages_writer.h"

#include <fmt/format.h>

#include "core/json_writer.h"

namespace tandem::api {
namespace {

const char* block_type_name(messages_writer::block::kind k) {
    switch (k) {
        case messages_writer::block::kind::thinking: return "thinking";
        case messages_writer::block::kind::tool_use: return "tool_use";
        default: return "text";
    }
}

}  // namespace

std::string sse_event(std::string_view name, std::string_view json) {
    return fmt::format("event: {}\ndata: {}\n\n", name, json);
}

messages_writer::messages_writer(std::string id, std::string model, std::string tool_id_prefix,
                                 bool stream)
    : id_(std::move(id)), model_(std::move(model)), tool_id_prefix_(std::move(tool_id_prefix)),
      stream_(stream) {}

std::string messages_writer::start(int64_t input_tokens) {
    json_writer w;
    w.begin_object().key("type").value("message_start").key("message").begin_object()
        .key("id").value(id_).key("type").value("message").key("role").value("assistant")
        .key("model").value(model_).key("content").begin_array().end_array()
        .key("stop_reason").null().key("stop_sequence").null()
        .key("usage").begin_object().key("input_tokens").value(input_tokens)
        .key("output_tokens").value(int64_t{0}).end_object()
        .end_object().end_object();
    return sse_event("message_start", w.str()) + sse_event("ping", R"({"type":"ping"})");
}

std::string messages_writer::stop_open_block() {
    if (!stream_ || !block_open_) return {};
    block_open_ = false;
    const int64_t index = static_cast<int64_t>(blocks_.size()) - 1;
    std::string out;
    if (blocks_.back().type == block::kind::thinking) {
        json_writer w;
        w.begin_object().key("type").value("content_block_delta").key("index").value(index)
            .key("delta").begin_object().key("type").value("signature_delta")
            .key("signature").value(id_).end_object().end_object();
        out += sse_event("content_block_delta", w.str());
    }
    json_writer w;
    w.begin_object().key("type").value("content_block_stop").key("index").value(index).end_object();
    return out + sse_event("content_block_stop", w.str());
}

std::string messages_writer::start_block(block b) {
    std::string out = stop_open_block();
    blocks_.push_back(std::move(b));
    if (!stream_) return out;
    block_open_ = true;
    const block& nb = blocks_.back();
    json_writer w;
    w.begin_object().key("type").value("content_block_start")
        .key("index").value(static_cast<int64_t>(blocks_.size()) - 1)
        .key("content_block").begin_object().key("type").value(block_type_name(nb.type));
    if (nb.type == block::kind::thinking) w.key("thinking").value("").key("signature").value("");
    if (nb.type == block::kind::text) w.key("text").value("");
    if (nb.type == block::kind::tool_use) {
        w.key("id").value(nb.id).key("name").value(nb.name).key("input").begin_object().end_object();
    }
    w.end_object().end_object();
    return out + sse_event("content_block_start", w.str());
}

std::string messages_writer::append_text(block::kind k, std::string_view delta) {
    std::string out;
    if (blocks_.empty() || blocks_.back().type != k) out = start_block({k, {}, {}, {}, {}});
    blocks_.back().text += delta;
    if (!stream_) return out;
    const bool thinking = k == block::kind::thinking;
    json_writer w;
    w.begin_object().key("type").value("content_block_delta")
        .key("index").value(static_cast<int64_t>(blocks_.size()) - 1)
        .key("delta").begin_object().key("type").value(thinking ? "thinking_delta" : "text_delta")
        .key(thinking ? "thinking" : "text").value(delta).end_object().end_object();
    return out + sse_event("content_block_delta", w.str());
}

std::string messages_writer::add_tool_use(const text::output_event& ev) {
    std::string out = start_block({block::kind::tool_use, {}, tool_id_prefix_ + std::to_string(tool_calls_++),
                                   ev.tool_name, ev.arguments});
    if (!stream_) return out;
    json_writer w;
    w.begin_object().key("type").value("content_block_delta")
        .key("index").value(static_cast<int64_t>(blocks_.size()) - 1)
        .key("delta").begin_object().key("type").value("input_json_delta")
        .key("partial_json").value(ev.arguments).end_object().end_object();
    out += sse_event("content_block_delta", w.str());
    return out + stop_open_block();
}

std::string messages_writer::apply(const std::vector<text::output_event>& events) {
    std::string out;
    for (const auto& ev : events) {
        switch (ev.type) {
            case text::output_event::kind::reasoning: out += append_text(block::kind::thinking, ev.text); break;
            case text::output_event::kind::content: out += append_text(block::kind::text, ev.text); break;
            case text::output_event::kind::tool_call: out += add_tool_use(ev); break;
        }
    }
    return out;
}

std::string messages_writer::stop_reason(bool length, const std::string& stop_sequence) const {
    if (!stop_sequence.empty()) return "stop_sequence";
    if (length) return "max_tokens";
    for (const block& b : blocks_) {
        if (b.type == block::kind::tool_use) return "tool_use";
    }
    return "end_turn";
}

std::string messages_writer::finish(bool length, const std::string& stop_sequence, int64_t output_tokens) {
    std::string out = stop_open_block();
    json_writer w;
    w.begin_object().key("type").value("message_delta").key("delta").begin_object()
        .key("stop_reason").value(stop_reason(length, stop_sequence)).key("stop_sequence");
    if (stop_sequence.empty()) w.null(); else w.value(stop_sequence);
    w.end_object().key("usage").begin_object().key("output_tokens").value(output_tokens)
        .end_object().end_object();
    out += sse_event("message_delta", w.str());
    return out + sse_event("message_stop", R"({"type":"message_stop"})");
}

std::string messages_writer::message(bool length, const std::string& stop_sequence,
                                     int64_t input_tokens, int64_t output_tokens) const {
    json_writer w;
    w.begin_object().key("id").value(id_).key("type").value("message").key("role").value("assistant")
        .key("model").value(model_).key("content").begin_array();
    for (const block& b : blocks_) {
        w.begin_object().key("type").value(block_type_name(b.type));
        if (b.type == block::kind::thinking) w.key("thinking").value(b.text).key("signature").value(id_);
        if (b.type == block::kind::text) w.key("text").value(b.text);
        if (b.type == block::kind::tool_use) {
            w.key("id").value(b.id).key("name").value(b.name).key("input").raw(b.input);
        }
        w.end_object();
    }
    w.end_array().key("stop_reason").value(stop_reason(length, stop_sequence)).key("stop_sequence");
    if (stop_sequence.empty()) w.null(); else w.value(stop_sequence);
    w.key("usage").begin_object().key("input_tokens").value(input_tokens)
        .key("output_tokens").value(output_tokens).end_object();
    return w.end_object().take();
}

}  // namespace tandem::api
