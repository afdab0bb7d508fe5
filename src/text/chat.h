// text/chat.h — The chat request as plain structs, and how it becomes a DeepSeek-V4 prompt.
//
// Owns the prompt format of DeepSeek-V4 (spec dsv4-chat-and-tokenizer.md §2): special tokens,
// DSML tool-call markup, the tools and response-format blocks, tool-result merging and
// ordering, thinking/chat modes and reasoning-effort prefixes.
//
// Two renderers over the same structs:
//   render_chat()            what the official API does (deepseek-recipe 0.2.0, byte-exact on a
//                            generated corpus): all system messages hoisted into one block,
//                            request-level tools, a generation header at the end, reasoning of
//                            earlier turns dropped unless tools are present.
//   render_messages_official() DeepSeek's encoding_dsv4.py (encode_messages), byte-exact with
//                            the published golden fixtures: message-level tools and
//                            response_format, developer role, tasks, wo_eos, drop_thinking.
// Both mark which parts of the prompt are special tokens, so tokenize_prompt() can emit their
// ids directly and BPE-encode everything else as plain text: a "<｜User｜>" typed by a user never
// becomes a special token (deepseek-recipe issue #5).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/tokenizer.h"

namespace tandem::text {

enum class chat_role { system, developer, user, assistant, tool, latest_reminder };

struct chat_tool_call {
    std::string id;
    std::string name;
    std::string arguments;  // the client's JSON text (OpenAI function.arguments), not validated
};

struct chat_message {
    chat_role role = chat_role::user;
    std::string content;  // content-part arrays are joined with "\n\n" by the request parser
    std::optional<std::string> reasoning_content;
    std::vector<chat_tool_call> tool_calls;  // assistant only
    std::string tool_call_id;                // tool only
    std::string name;                        // accepted, not rendered
    bool prefix = false;  // the final assistant message is continued, not closed (no EOS)

    // Fields only render_messages_official() reads (encoding_dsv4.py message keys):
    std::vector<std::string> tools;              // OpenAI tool objects ({"type","function"}), raw JSON
    std::optional<std::string> response_format;  // raw JSON
    std::optional<std::string> task;             // action, query, authority, domain, title, read_url
    bool wo_eos = false;
};

// The effort names of the API. Prefix text (thinking mode only): unset/low none; high/xhigh
// "Absolute maximum…"; max "Beyond maximum…" (deepseek-recipe profiles). encoding_dsv4.py's
// original effort="max" is this enum's `high`.
enum class reasoning_effort { unset, low, high, xhigh, max };
enum class response_format_kind { text, json_object, json_schema };
enum class tool_choice_kind { automatic, none, required, named };

struct chat_request {
    std::vector<chat_message> messages;
    std::vector<std::string> tools;  // each tool's "function" object as raw JSON
    tool_choice_kind tool_choice = tool_choice_kind::automatic;
    std::string tool_choice_name;    // for tool_choice_kind::named
    bool thinking = true;
    reasoning_effort effort = reasoning_effort::high;
    response_format_kind response_format = response_format_kind::text;
    std::string response_schema;     // json_schema.schema as raw JSON
};

// Options of the official encoder (encode_messages arguments).
struct official_options {
    bool thinking = true;
    bool drop_thinking = true;
    bool add_bos = true;
    reasoning_effort effort = reasoning_effort::unset;
};

// A prompt and the byte ranges that are special tokens.
struct rendered_prompt {
    struct piece {
        int64_t begin;
        int64_t end;
        bool special;  // the bytes spell one added token
    };
    std::string text;
    std::vector<piece> pieces;  // cover `text` in order; adjacent plain pieces are merged
    // Where generation starts, for the output parser: inside reasoning (prompt ends "<think>"),
    // or in content. A prefix continuation of reasoning also starts in reasoning.
    bool generation_starts_in_reasoning = false;

    void append_text(std::string_view s);
    void append_special(std::string_view s);
};

result<rendered_prompt> render_chat(const chat_request& request);
result<rendered_prompt> render_messages_official(const std::vector<chat_message>& messages,
                                                 const official_options& options);

// Token ids of a rendered prompt: special pieces map to their added-token ids (an error names a
// special the tokenizer lacks); plain pieces are BPE-encoded without added-token matching.
result<std::vector<token_id>> tokenize_prompt(const rendered_prompt& prompt, const tokenizer& tok);

// Parses an OpenAI chat-completions body into a chat_request (fields other than the prompt's
// are ignored). Errors name the offending field ("messages[2].tool_calls[0].function.name").
// Thinking: `thinking: {"type": "enabled"|"adaptive"|"disabled"}` or reasoning_effort "none"
// turns it off; on by default. reasoning_effort: see reasoning_effort_from_name.
result<chat_request> chat_request_from_openai_json(std::string_view body);

// DeepSeek's reasoning effort names: none (→ unset), minimal and low, medium and high (the
// default, also for ""), xhigh, ultra and max. Nothing for an unknown name.
std::optional<reasoning_effort> reasoning_effort_from_name(std::string_view name);
// Sets req->thinking and req->effort from a thinking type ("" when not given, enabled,
// adaptive, disabled) and an effort name, as DeepSeek's API: disabled, or effort "none"
// without a type, is chat mode. An unknown effort is an error naming `effort_field`.
status apply_thinking(std::string_view thinking_type, std::string_view effort_name,
                      const std::string& effort_field, chat_request* req);

// Parses a JSON array of messages in encoding_dsv4.py's shape (OpenAI messages plus the
// message-level keys tools, response_format, task, wo_eos; tool_call_id optional), for
// render_messages_official().
result<std::vector<chat_message>> chat_messages_from_json(std::string_view messages_json);

const char* chat_role_name(chat_role role);

}  // namespace tandem::text
