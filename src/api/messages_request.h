// api/messages_request.h — An Anthropic Messages API body (POST /v1/messages) as the chat
// pipeline's request: the same text::chat_request the OpenAI endpoint builds, so the prompt,
// request rules, sampler and output parser are the chat endpoint's own.
//
// Mapping (what DeepSeek's Anthropic-compatible API does, checked against deepseek-recipe's
// MessagesRequest conversion):
//   system (string or text blocks)        → one system message, blocks joined by "\n\n"
//   user text blocks                      → user messages; tool_result blocks → tool messages
//   assistant thinking / text / tool_use  → reasoning_content / content / tool_calls
//   tools[{name, description, input_schema}] → function tools with input_schema as parameters
//   tool_choice auto | any | tool | none  → auto | auto | named | none (DeepSeek's converter
//                                           prompts "any" like "auto")
//   thinking {type: enabled|adaptive|disabled}, output_config.effort → thinking mode and effort
//                                           (thinking is on unless disabled, as DeepSeek's API)
//   max_tokens, temperature, top_p, top_k, stop_sequences, stream → generation options
// Errors name the Anthropic field ("messages.2.content.0.tool_use_id: missing").
#pragma once

#include <simdjson.h>

#include <string_view>

#include "api/generation_options.h"
#include "core/status.h"
#include "text/chat.h"

namespace tandem::api {

struct messages_request {
    text::chat_request chat;
    generation_options opts;  // n = 1; stop = stop_sequences
};

// `body` is the request text; `fields` the same body parsed by simdjson (sampling fields).
result<messages_request> messages_request_from_json(std::string_view body,
                                                    const simdjson::dom::object& fields);

}  // namespace tandem::api
