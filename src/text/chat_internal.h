// text/chat_internal.h — Template text and DSML writers shared by the two chat renderers.
#pragma once

#include <string_view>

#include "text/chat.h"
#include "text/json_value.h"

namespace tandem::text::chat_detail {

inline constexpr std::string_view bos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view eos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view user_token = "<｜User｜>";
inline constexpr std::string_view assistant_token = "<｜Assistant｜>";
inline constexpr std::string_view latest_reminder_token = "<｜latest_reminder｜>";
inline constexpr std::string_view think_open = "<think>";
inline constexpr std::string_view think_close = "</think>";
inline constexpr std::string_view dsml = "｜DSML｜";

extern const std::string_view effort_absolute_maximum;
extern const std::string_view effort_beyond_maximum;

// The prefix a reasoning effort puts after BOS in thinking mode ("" for unset and low).
std::string_view effort_prefix(reasoning_effort effort);

// Appends template text, marking its <think>, </think> and ｜DSML｜ as special tokens. Only
// for text the server wrote, never for client text.
void append_template(rendered_prompt* p, std::string_view text);

// "## Tools ... {tool_schemas} ... tool calls.\n" with the given schema lines.
void append_tools_block(rendered_prompt* p, const std::vector<std::string>& schema_lines);

// "\n\n<｜DSML｜tool_calls>\n<invokes>\n</｜DSML｜tool_calls>". `recipe_layout` selects
// deepseek-recipe's invoke layout (each parameter line ends in "\n") over encoding_dsv4.py's
// (parameters joined by "\n", then "\n"); they differ only for calls without arguments.
void append_tool_calls(rendered_prompt* p, const std::vector<chat_tool_call>& calls,
                       json_number_style style, bool recipe_layout);

// encoding_dsv4.py's render of tool results in a user turn.
void append_tool_result(rendered_prompt* p, std::string_view content);

// Reorders tool results to the call order of the last assistant message with tool calls.
std::vector<const chat_message*> sort_tool_results(std::vector<const chat_message*> results,
                                                   const chat_message* last_caller);

}  // namespace tandem::text::chat_detail

namespace tandem::text::chat_detail {

// One block of a merged user turn: its text, or a tool result message.
struct user_block {
    const chat_message* tool = nullptr;  // set for a tool result
    std::string text;                    // for a text block
};

// Puts the tool-result blocks of a turn into call order, leaving text blocks in place
// (sort_tool_results_by_call_order).
void sort_turn_blocks(std::vector<user_block>* blocks, const chat_message* last_caller);

}  // namespace tandem::text::chat_detail
