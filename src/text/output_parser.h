// text/output_parser.h — Splits generated text into reasoning, content and tool calls.
//
// A streaming, byte-level state machine over the detokenized output of DeepSeek-V4 (spec
// dsv4-chat-and-tokenizer.md §3): reasoning up to </think>, content, and DSML tool-call blocks
// (<｜DSML｜tool_calls>, also V3.2's function_calls and a bare <｜DSML｜invoke>) with parallel
// invokes and string / JSON parameters. push() returns deltas ready for SSE and holds back
// only what may still turn out to be markup: a partial tag, the newlines before a block, an
// incomplete UTF-8 character, and the invoke being read.
//
// Failure policy (fail safe, never lossy):
//   * A tool call is emitted only when its </｜DSML｜invoke> arrived and it validated: a
//     header `name="…"`, parameters `name="…" string="true|false"`, no duplicate keys, every
//     string="false" value valid JSON, nothing but whitespace between tags, and (when a tool
//     list is given) a known name. Arguments are then always a valid JSON object string.
//   * Anything else inside a block (junk, missing attributes, a closing tag inside a value,
//     a value cut off by the next tag or inside its closing tag, truncation, an unknown tool,
//     an empty block) is malformed: the unparsed raw text of the
//     block, including the newlines before it, is returned as content, and the response is
//     flagged (malformed(), malformed_count() for the metric). Calls already emitted stand.
//   * Markup-like text left in content (glyph variants such as |DSML| or ‖DSML‖, plain
//     <tool_calls>/<invoke> XML), or text after a completed block (the grammar allows only
//     EOS there), also flags the response; the text is kept as is.
//   * A block opened inside reasoning (no </think>) ends the reasoning and is parsed as calls,
//     as DeepSeek's own streaming parser does; tool_call_in_reasoning() reports it.
//   * A stray </think> in content is dropped (a control token, not text).
// Whitespace follows DeepSeek's API (deepseek-recipe): newlines at the start of reasoning and
// of content, and right before </think> or a block, are formatting and not returned.
// One parser per response; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::text {

struct output_parser_options {
    bool starts_in_reasoning = false;   // the prompt ended with <think>
    bool starts_in_tool_calls = false;  // the prompt opened <｜DSML｜tool_calls> (tool_choice required)
    bool check_tool_names = false;      // reject calls to names not in tool_names
    std::vector<std::string> tool_names;
};

struct output_event {
    enum class kind { reasoning, content, tool_call };
    kind type = kind::content;
    std::string text;        // reasoning / content delta (valid UTF-8)
    int64_t tool_index = 0;  // tool_call: OpenAI tool_calls[].index, in invoke order
    std::string tool_name;
    std::string arguments;   // tool_call: a complete JSON object, e.g. {"location": "Paris"}
};

class output_parser {
public:
    explicit output_parser(output_parser_options options);

    // Consumes the next bytes of generated text and appends the resulting events.
    void push(std::string_view bytes, std::vector<output_event>* events);
    // End of generation (EOS, stop or length): flushes everything held back.
    void finish(std::vector<output_event>* events);

    bool malformed() const { return malformed_count_ > 0; }
    int64_t malformed_count() const { return malformed_count_; }
    int64_t tool_call_count() const { return next_tool_index_; }
    bool tool_call_in_reasoning() const { return call_in_reasoning_; }

    enum class state {
        reasoning,       // before </think>
        content,         // answer text
        block,           // inside a tool-call block, between invokes
        invoke_header,   // after <｜DSML｜invoke, reading name="…">
        invoke_body,     // between parameters
        param_header,    // after <｜DSML｜parameter, reading name="…" string="…">
        param_value,     // reading the value up to </｜DSML｜parameter>
        skip_block,      // malformed block: copying raw text to content until its end tag
    };

private:
    bool step(bool at_end, std::vector<output_event>* events);
    bool step_text(bool at_end, std::vector<output_event>* events);
    bool step_block(bool at_end, std::vector<output_event>* events);
    bool step_invoke_header(bool at_end, std::vector<output_event>* events);
    bool step_invoke_body(bool at_end, std::vector<output_event>* events);
    bool step_param_header(bool at_end, std::vector<output_event>* events);
    bool step_param_value(bool at_end, std::vector<output_event>* events);
    bool step_skip_block(bool at_end, std::vector<output_event>* events);
    void open_block(std::string_view opener, bool implicit);
    void consume_raw(size_t n);
    void fail(std::vector<output_event>* events);
    void emit_text(output_event::kind kind, std::string_view text, std::vector<output_event>* events);
    void note_markup(std::string_view text);
    void finish_call(std::vector<output_event>* events);

    output_parser_options options_;
    state state_;
    std::string buf_;          // unconsumed input
    size_t scan_from_ = 0;     // param_value: where the search for the closing tag resumes
    std::string raw_;          // consumed block text not yet represented by an emitted call
    std::string block_close_;  // the end tag of the open block ("" for a bare invoke)
    bool block_has_call_ = false;
    std::string call_name_;
    std::vector<std::pair<std::string, std::string>> call_params_;  // key, JSON value text
    std::string param_key_;
    bool param_is_string_ = false;
    int64_t next_tool_index_ = 0;
    int64_t malformed_count_ = 0;
    bool call_in_reasoning_ = false;
    bool segment_start_ = true;     // no reasoning/content text emitted yet in this segment
    std::string content_tail_;      // last bytes of content, so markers split across deltas are seen
    bool markup_in_content_ = false;
    bool after_block_ = false;      // a block was completed; only whitespace may follow
};

}  // namespace tandem::text
