// text/chat_render.cpp — The API prompt (deepseek-recipe 0.2.0 semantics).
//
//   BOS [effort prefix] [system block] turn* generation-header [opened tool block]
//   system block = non-empty system contents joined by "\n\n"
//                  [+ "\n\n" + tools block] [+ "\n\n" + response-format text]
//   user turn    = "<｜User｜>" + blocks joined by "\n\n" (consecutive user and tool messages
//                  merge; tool results in the call order of the last assistant with calls)
//   assistant    = "<｜Assistant｜>" + think + content [+ DSML calls] + EOS
//                  think = "<think>" + reasoning + "</think>" when thinking and tools are in
//                  play (reasoning is kept), "</think>" otherwise
//   reminder     = "<｜latest_reminder｜>" + content
//   header       = "<｜Assistant｜>" + ("<think>" | "</think>"), unless the last message is a
//                  prefix assistant, which renders open (no EOS) instead.
#include <algorithm>
#include <unordered_set>

#include "text/chat_internal.h"
#include "text/schema_rules.h"

namespace tandem::text {

namespace {

using namespace chat_detail;

status request_error(const std::string& what) {
    return make_error(error_code::invalid_argument, what);
}

// The conversation rules the API enforces before rendering.
status validate(const chat_request& req) {
    if (req.messages.empty()) return request_error("Empty input messages").with_param("messages");
    if (req.thinking && (req.tool_choice == tool_choice_kind::required ||
                         req.tool_choice == tool_choice_kind::named)) {
        return request_error("Thinking mode does not support this tool_choice").with_param("tool_choice");
    }
    // Only the tools the prompt will show count (tool_choice none shows none, a named choice one).
    int64_t strict_tools = 0, shown_tools = 0;
    for (const std::string& raw : req.tools) {
        auto fn = json_parse(raw);
        if (!fn || req.tool_choice == tool_choice_kind::none) continue;
        const json_value* name = fn->find("name");
        if (req.tool_choice == tool_choice_kind::named && (!name || name->text != req.tool_choice_name)) continue;
        ++shown_tools;
        const json_value* strict = fn->find("strict");
        if (strict && strict->type == json_value::kind::boolean && strict->boolean) ++strict_tools;
    }
    const bool any_calls = std::any_of(req.messages.begin(), req.messages.end(),
                                       [](const chat_message& m) { return !m.tool_calls.empty(); });
    if (req.response_format == response_format_kind::json_object && req.messages.back().prefix) {
        return request_error("response_format: json_object cannot be used with a prefix assistant message");
    }
    if ((!req.tools.empty() || any_calls) && req.messages.back().prefix) {
        return request_error("Function call should not be used with prefix").with_param("messages");
    }
    if (strict_tools != 0 && strict_tools != shown_tools) {
        return request_error("Cannot use strict tool with non-strict tool in the same request").with_param("tools");
    }
    if (strict_tools != 0 && req.response_format != response_format_kind::text) {
        return request_error("response_format should not be used with tools").with_param("response_format");
    }
    std::unordered_set<std::string> pending;
    bool in_tool_results = false;
    for (size_t i = 0; i < req.messages.size(); ++i) {
        const chat_message& m = req.messages[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (m.role == chat_role::developer) return request_error(where + ".role: 'developer' is not supported");
        if (m.prefix && (i + 1 != req.messages.size() || m.role != chat_role::assistant)) {
            return request_error(where + ".prefix: only the final assistant message may be a prefix");
        }
        if (m.prefix && !m.tool_calls.empty()) return request_error(where + ".prefix: tool calls cannot be continued");
        if (m.role == chat_role::tool) {
            if (!in_tool_results) return request_error(where + ": a tool message must answer a preceding assistant message with tool_calls");
            if (pending.erase(m.tool_call_id) == 0) {
                return request_error(where + ".tool_call_id: '" + m.tool_call_id + "' answers no pending tool call");
            }
            continue;
        }
        if (!pending.empty()) return request_error(where + ": tool messages must answer every tool_call_id of the preceding assistant message first");
        in_tool_results = false;
        if (m.role == chat_role::assistant && !m.tool_calls.empty()) {
            for (size_t k = 0; k < m.tool_calls.size(); ++k) {
                if (!pending.insert(m.tool_calls[k].id).second) {
                    return request_error(where + ".tool_calls[" + std::to_string(k) + "].id: duplicate '" + m.tool_calls[k].id + "'");
                }
            }
            in_tool_results = true;
        }
    }
    if (!pending.empty()) {
        return request_error("messages: every tool_call_id of the last assistant message needs a tool message");
    }
    return status::ok();
}

// {"name", "description", "parameters"} in that order, as the API re-serializes a tool;
// strict tools' parameters as the API's strict schema model writes them (schema_rules.h).
result<std::string> tool_schema_line(const std::string& raw, size_t index) {
    const std::string where = "tools[" + std::to_string(index) + "].function";
    auto parsed = json_parse(raw);
    if (!parsed || !parsed->is_object()) return request_error(where + ": not a JSON object");
    const json_value* name = parsed->find("name");
    if (name == nullptr || !name->is_string()) return request_error(where + ".name: missing");
    json_value out;
    out.type = json_value::kind::object;
    out.set("name", *name);
    const json_value* desc = parsed->find("description");
    out.set("description", desc && desc->is_string() ? *desc : json_value::make_string(""));
    json_value params;
    params.type = json_value::kind::object;
    const json_value* given = parsed->find("parameters");
    if (given && given->type != json_value::kind::null) params = *given;
    const json_value* strict = parsed->find("strict");
    if (strict && strict->type == json_value::kind::boolean && strict->boolean) {
        auto normalized = normalize_strict_parameters(given);
        if (!normalized) return normalized.error();
        params = std::move(*normalized);
    }
    out.set("parameters", std::move(params));
    return json_dump(out, json_number_style::recipe);
}

status append_system_block(const chat_request& req, bool with_tools, rendered_prompt* p) {
    std::string system;
    for (const chat_message& m : req.messages) {
        if (m.role != chat_role::system || m.content.empty()) continue;
        if (!system.empty()) system += "\n\n";
        system += m.content;
    }
    p->append_text(system);
    if (with_tools) {
        std::vector<std::string> lines;
        for (size_t i = 0; i < req.tools.size(); ++i) {
            auto line = tool_schema_line(req.tools[i], i);
            if (!line) return line.error();
            if (req.tool_choice == tool_choice_kind::named) {
                auto parsed = json_parse(req.tools[i]);
                const json_value* n = parsed->find("name");
                if (n->text != req.tool_choice_name) continue;
            }
            lines.push_back(std::move(line).value());
        }
        if (lines.empty()) {
            return request_error("Invalid value for 'tool_call': no function named '" + req.tool_choice_name +
                                 "' was specified in the 'tools' parameter.")
                .with_param("tool_choice");
        }
        p->append_text("\n\n");
        append_tools_block(p, lines);
    }
    if (req.response_format == response_format_kind::json_schema) {
        auto schema = json_parse(req.response_schema);
        if (!schema) return request_error("response_format.json_schema.schema: " + schema.error().message());
        p->append_text("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n");
        p->append_text(json_dump(*schema, json_number_style::recipe));
    } else if (req.response_format == response_format_kind::json_object) {
        p->append_text("\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.");
    }
    return status::ok();
}

// The API keeps an assistant's tool calls keyed by id, so they render (and their results
// sort) in byte order of the id ("call_10" < "call_9"), not in the order given.
std::vector<chat_tool_call> calls_by_id(const chat_message& m) {
    std::vector<chat_tool_call> calls = m.tool_calls;
    std::stable_sort(calls.begin(), calls.end(),
                     [](const chat_tool_call& a, const chat_tool_call& b) { return a.id < b.id; });
    return calls;
}

void append_think(const chat_request& req, bool keep_reasoning, const chat_message& m,
                  rendered_prompt* p) {
    if (!req.thinking || !keep_reasoning) {
        p->append_special(think_close);
        return;
    }
    p->append_special(think_open);
    p->append_text(m.reasoning_content.value_or(""));
    p->append_special(think_close);
}

void append_assistant(const chat_request& req, bool keep_reasoning, const chat_message& m,
                      rendered_prompt* p) {
    p->append_special(assistant_token);
    if (m.prefix) {  // continued by the model: reasoning stays open while content is empty
        if (req.thinking) {
            p->append_special(think_open);
            p->append_text(m.reasoning_content.value_or(""));
            p->generation_starts_in_reasoning = m.content.empty();
            if (m.content.empty()) return;
        }
        p->append_special(think_close);
        p->append_text(m.content);
        return;
    }
    append_think(req, keep_reasoning, m, p);
    p->append_text(m.content);
    if (!m.tool_calls.empty()) append_tool_calls(p, calls_by_id(m), json_number_style::recipe, true);
    p->append_special(eos);
}

void append_user_turn(std::vector<user_block>* blocks, const chat_message* last_caller,
                      rendered_prompt* p) {
    sort_turn_blocks(blocks, last_caller);
    p->append_special(user_token);
    for (size_t i = 0; i < blocks->size(); ++i) {
        if (i) p->append_text("\n\n");
        const user_block& b = (*blocks)[i];
        if (b.tool) append_tool_result(p, b.tool->content);
        else p->append_text(b.text);
    }
    blocks->clear();
}

}  // namespace

result<rendered_prompt> render_chat(const chat_request& req) {
    TANDEM_RETURN_IF_ERROR(validate(req));
    const bool with_tools = !req.tools.empty() && req.tool_choice != tool_choice_kind::none;
    rendered_prompt p;
    p.append_special(bos);
    if (req.thinking) p.append_text(effort_prefix(req.effort));
    TANDEM_RETURN_IF_ERROR(append_system_block(req, with_tools, &p));

    std::vector<user_block> turn;
    bool pending_user = false;  // a user turn is open (it may have no blocks: "<｜User｜>")
    chat_role prev_role = chat_role::system;  // of the previous non-system message
    const chat_message* last_caller = nullptr;
    chat_message sorted_caller;  // the last assistant's calls in rendering order
    for (const chat_message& m : req.messages) {
        if (m.role == chat_role::system) continue;
        if (m.role == chat_role::user || m.role == chat_role::tool) {
            pending_user = true;
            // Consecutive user messages become one text block: their non-empty contents joined
            // by "\n\n" (the API merges them before tool results are merged in).
            const bool joins = m.role == chat_role::user && prev_role == chat_role::user;
            prev_role = m.role;
            if (m.role == chat_role::tool) {
                turn.push_back({&m, {}});
            } else if (!joins) {
                turn.push_back({nullptr, m.content});
            } else if (!m.content.empty()) {
                std::string& text = turn.back().text;
                text = text.empty() ? m.content : text + "\n\n" + m.content;
            }
            continue;
        }
        if (pending_user) append_user_turn(&turn, last_caller, &p);
        pending_user = false;
        prev_role = m.role;
        if (m.role == chat_role::latest_reminder) {
            p.append_special(latest_reminder_token);
            p.append_text(m.content);
        } else {
            append_assistant(req, with_tools, m, &p);
            if (!m.tool_calls.empty()) {
                sorted_caller.tool_calls = calls_by_id(m);
                last_caller = &sorted_caller;
            }
        }
    }
    if (pending_user) append_user_turn(&turn, last_caller, &p);
    if (req.messages.back().prefix) return p;

    p.append_special(assistant_token);
    p.append_special(req.thinking ? think_open : think_close);
    p.generation_starts_in_reasoning = req.thinking;
    if (with_tools && (req.tool_choice == tool_choice_kind::required ||
                       req.tool_choice == tool_choice_kind::named)) {
        p.append_text("\n\n<");
        p.append_special(dsml);
        p.append_text("tool_calls>\n");
    }
    return p;
}

}  // namespace tandem::text
