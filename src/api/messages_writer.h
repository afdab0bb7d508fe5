// api/messages_writer.h — Anthropic Messages output: the output parser's events as content
// blocks, written as one message object or as Anthropic's SSE event sequence.
//
// reasoning → a "thinking" block, content → a "text" block, each tool call → a "tool_use"
// block; an event of another kind closes the open block and opens the next, so blocks keep the
// model's order. Stream: message_start, ping, then per block content_block_start, its deltas
// (thinking_delta, text_delta, input_json_delta; a thinking block ends with a signature_delta)
// and content_block_stop, then message_delta (stop_reason, stop_sequence, usage) and
// message_stop. The signature of a thinking block is the message id (as DeepSeek's API does);
// nothing checks it when a client sends the block back. Pure: no I/O, one per response.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/output_parser.h"

namespace tandem::api {

class messages_writer {
public:
    // `tool_id_prefix`: tool_use ids are "<prefix><n>", n counting calls from 0.
    messages_writer(std::string id, std::string model, std::string tool_id_prefix, bool stream);

    // Stream: the message_start and ping events.
    std::string start(int64_t input_tokens);
    // Folds events into blocks; returns the SSE events they produce (empty unless streaming).
    std::string apply(const std::vector<text::output_event>& events);
    // stop_reason of a finished generation: "stop_sequence" when `stop_sequence` is set,
    // "max_tokens" for a length stop, "tool_use" when a call was made, else "end_turn".
    std::string stop_reason(bool length, const std::string& stop_sequence) const;
    // Stream: closes the open block, then message_delta and message_stop.
    std::string finish(bool length, const std::string& stop_sequence, int64_t output_tokens);
    // Whole response: the message object.
    std::string message(bool length, const std::string& stop_sequence, int64_t input_tokens,
                        int64_t output_tokens) const;

    struct block {
        enum class kind { thinking, text, tool_use };
        kind type = kind::text;
        std::string text;             // thinking or text
        std::string id, name, input;  // tool_use; input is a JSON object
    };
    const std::vector<block>& blocks() const { return blocks_; }

private:
    std::string stop_open_block();
    std::string start_block(block b);
    std::string append_text(block::kind k, std::string_view delta);
    std::string add_tool_use(const text::output_event& ev);

    std::string id_, model_, tool_id_prefix_;
    bool stream_;
    std::vector<block> blocks_;
    bool block_open_ = false;  // stream: blocks_.back() started and not yet stopped
    int64_t tool_calls_ = 0;
};

// "event: <name>\ndata: <json>\n\n"
std::string sse_event(std::string_view name, std::string_view json);

}  // namespace tandem::api
