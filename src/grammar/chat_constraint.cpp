// grammar/chat_constraint.cpp — Chat request → structural tag (see the header for the rules).
//
// Structural tag vocabulary used here (xgrammar's JSON format): "sequence" of elements,
// "or", "const_string", "any_text" (free text without given substrings), "tag" (begin text,
// content, end text), "tags_with_separator" (repeated tags), "triggered_tags" (free text in
// which a trigger string opens a tag), "json_schema" with style "json" or "deepseek_xml" (DSML
// parameters: <｜DSML｜parameter name="k" string="true|false">v</｜DSML｜parameter>).
#include "grammar/chat_constraint.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "core/json_writer.h"
#include "text/json_value.h"

namespace tandem::grammar {

namespace {

using text::json_value;

// The markup of DeepSeek-V4's DSML tool calls, as text/chat_common.cpp renders it.
constexpr std::string_view k_block_open = "<｜DSML｜tool_calls>\n";
constexpr std::string_view k_block_trigger = "<｜DSML｜tool_calls>";
constexpr std::string_view k_block_close = "</｜DSML｜tool_calls>";
constexpr std::string_view k_invoke_open = "<｜DSML｜invoke name=\"";
constexpr std::string_view k_invoke_open_end = "\">\n";
// Invokes are joined by "\n" and the last one is followed by "\n" before the block's end, so
// every invoke carries its trailing newline and the separator is empty (as in xgrammar's own
// DeepSeek templates).
constexpr std::string_view k_invoke_close = "</｜DSML｜invoke>\n";

// Text that must not appear in the free reasoning: the output parser would read it as the end
// of reasoning or the start of a tool-call block. (JSON strings are not filtered: xgrammar
// drops a string's minLength/maxLength when it filters it, which would break the schema.)
constexpr std::string_view k_markup[] = {"<think>", "</think>", "｜DSML｜"};

// A random or weak model can emit whitespace forever where JSON allows it. Real JSON output
// needs short runs (indentation); DSML's canonical form has single newlines between tags and
// none around values, so a weak model gets one character there.
constexpr int64_t k_max_json_whitespace = 4;
constexpr int64_t k_max_dsml_whitespace = 1;

status field_error(const std::string& field, const std::string& what) {
    return make_error(error_code::invalid_argument, field + ": " + what);
}

void write_excludes(json_writer& w) {
    w.key("excludes").begin_array();
    for (std::string_view m : k_markup) w.value(m);
    w.end_array();
}

void write_const(json_writer& w, std::string_view text) {
    w.begin_object().key("type").value("const_string").key("value").value(text).end_object();
}

void write_any_text(json_writer& w) {
    w.begin_object().key("type").value("any_text");
    write_excludes(w);
    w.end_object();
}

// `schema_json` is an object or a boolean (checked by the caller).
void write_json_schema(json_writer& w, const std::string& schema_json, std::string_view style) {
    w.begin_object().key("type").value("json_schema").key("json_schema").raw(schema_json)
        .key("style").value(style).key("max_whitespace_cnt")
        .value(style == "json" ? k_max_json_whitespace : k_max_dsml_whitespace);
    w.end_object();
}

struct tool_spec {
    std::string name;
    std::string parameters;  // JSON schema text, object or boolean
    bool strict = false;
};

// The tools the prompt shows (tool_choice none: none; named: that one).
result<std::vector<tool_spec>> offered_tools(const text::chat_request& req) {
    std::vector<tool_spec> out;
    if (req.tool_choice == text::tool_choice_kind::none) return out;
    for (size_t i = 0; i < req.tools.size(); ++i) {
        const std::string where = "tools[" + std::to_string(i) + "].function";
        auto fn = text::json_parse(req.tools[i]);
        if (!fn || !fn->is_object()) return field_error(where, "must be an object");
        const json_value* name = fn->find("name");
        if (name == nullptr || !name->is_string()) return field_error(where + ".name", "missing");
        if (req.tool_choice == text::tool_choice_kind::named && name->text != req.tool_choice_name) continue;
        tool_spec t;
        t.name = name->text;
        const json_value* strict = fn->find("strict");
        t.strict = strict && strict->type == json_value::kind::boolean && strict->boolean;
        const json_value* params = fn->find("parameters");
        if (params == nullptr || params->type == json_value::kind::null) {
            t.parameters = R"({"type":"object","properties":{}})";  // takes no arguments
        } else if (params->is_object()) {
            t.parameters = text::json_dump(*params, text::json_number_style::python);
        } else {
            return field_error(where + ".parameters", "must be a JSON object (a JSON schema)");
        }
        out.push_back(std::move(t));
    }
    return out;
}

// One invoke per call, of any offered tool; `use_schema` false accepts any DSML parameters.
void write_invokes(json_writer& w, const std::vector<tool_spec>& tools, bool use_schema, bool parallel) {
    w.begin_object().key("type").value("tags_with_separator").key("separator").value("")
        .key("at_least_one").value(true).key("stop_after_first").value(!parallel);
    w.key("tags").begin_array();
    for (const tool_spec& t : tools) {
        w.begin_object().key("type").value("tag")
            .key("begin").value(std::string(k_invoke_open) + t.name + std::string(k_invoke_open_end));
        w.key("content");
        write_json_schema(w, use_schema ? t.parameters : "true", "deepseek_xml");
        w.key("end").value(k_invoke_close).end_object();
    }
    w.end_array().end_object();
}

// "\n\n<｜DSML｜tool_calls>\n" invokes "</｜DSML｜tool_calls>": a whole block after content.
void write_block(json_writer& w, const std::vector<tool_spec>& tools, bool use_schema, bool parallel) {
    w.begin_object().key("type").value("tag")
        .key("begin").value("\n\n" + std::string(k_block_open)).key("content");
    write_invokes(w, tools, use_schema, parallel);
    w.key("end").value(k_block_close).end_object();
}

// The part after the reasoning. Returns false when the request leaves the output free.
result<bool> write_answer(json_writer& w, const text::chat_request& req,
                          const std::vector<tool_spec>& tools, bool parallel) {
    using text::tool_choice_kind;
    const bool forced = !tools.empty() && (req.tool_choice == tool_choice_kind::required ||
                                           req.tool_choice == tool_choice_kind::named);
    if (forced) {
        // The prompt ends with the opened block; the calls and its end remain.
        w.begin_object().key("type").value("sequence").key("elements").begin_array();
        write_invokes(w, tools, true, parallel);
        write_const(w, k_block_close);
        w.end_array().end_object();
        return true;
    }
    std::string schema;
    if (req.response_format == text::response_format_kind::json_schema) {
        auto parsed = text::json_parse(req.response_schema);
        if (!parsed || !(parsed->is_object() || parsed->type == json_value::kind::boolean)) {
            return field_error("response_format.json_schema.schema", "must be a JSON object");
        }
        schema = req.response_schema;
    } else if (req.response_format == text::response_format_kind::json_object) {
        schema = R"({"type":"object"})";
    }
    const bool strict_tools = !tools.empty() && std::all_of(tools.begin(), tools.end(),
                                                            [](const tool_spec& t) { return t.strict; });
    if (!schema.empty()) {
        if (tools.empty()) {
            write_json_schema(w, schema, "json");
            return true;
        }
        w.begin_object().key("type").value("or").key("elements").begin_array();
        write_json_schema(w, schema, "json");
        write_block(w, tools, strict_tools, parallel);
        w.end_array().end_object();
        return true;
    }
    if (!strict_tools) return false;
    // Free content; the first "<｜DSML｜tool_calls>" opens the one block, after which only EOS.
    w.begin_object().key("type").value("triggered_tags").key("triggers").begin_array()
        .value(k_block_trigger).end_array();
    w.key("tags").begin_array();
    w.begin_object().key("type").value("tag").key("begin").value(k_block_open).key("content");
    write_invokes(w, tools, true, parallel);
    w.key("end").value(k_block_close).end_object();
    w.end_array();
    w.key("excludes").begin_array().value("<think>").value("</think>").end_array();
    w.key("at_least_one").value(false).key("stop_after_first").value(true).end_object();
    return true;
}

}  // namespace

result<std::optional<std::string>> chat_constraint(const text::chat_request& req,
                                                   const text::rendered_prompt& prompt) {
    auto tools = offered_tools(req);
    if (!tools) return tools.error();
    json_writer answer;
    auto constrained = write_answer(answer, req, *tools, req.parallel_tool_calls);
    if (!constrained) return constrained.error();
    if (!*constrained) return std::optional<std::string>();
    if (!req.messages.empty() && req.messages.back().prefix) {
        return field_error("messages", "a prefix assistant message cannot be continued under "
                                       "response_format or strict tools");
    }
    json_writer w;
    w.begin_object().key("type").value("structural_tag").key("format");
    if (prompt.generation_starts_in_reasoning) {
        w.begin_object().key("type").value("sequence").key("elements").begin_array();
        w.begin_object().key("type").value("tag").key("begin").value("").key("content");
        write_any_text(w);
        w.key("end").value("</think>").end_object();
        w.raw(answer.str());
        w.end_array().end_object();
    } else {
        w.raw(answer.str());
    }
    w.end_object();
    return std::optional<std::string>(w.take());
}

}  // namespace tandem::grammar
