// text/chat_common.cpp — Template text and DSML writing shared by both chat renderers.
#include <algorithm>
#include <unordered_map>

#include "text/chat_internal.h"

namespace tandem::text {

void rendered_prompt::append_text(std::string_view s) {
    if (s.empty()) return;
    const auto begin = static_cast<int64_t>(text.size());
    text.append(s);
    if (!pieces.empty() && !pieces.back().special) {
        pieces.back().end = static_cast<int64_t>(text.size());
    } else {
        pieces.push_back({begin, static_cast<int64_t>(text.size()), false});
    }
}

void rendered_prompt::append_special(std::string_view s) {
    const auto begin = static_cast<int64_t>(text.size());
    text.append(s);
    pieces.push_back({begin, static_cast<int64_t>(text.size()), true});
}

const char* chat_role_name(chat_role role) {
    switch (role) {
        case chat_role::system: return "system";
        case chat_role::developer: return "developer";
        case chat_role::user: return "user";
        case chat_role::assistant: return "assistant";
        case chat_role::tool: return "tool";
        case chat_role::latest_reminder: return "latest_reminder";
    }
    return "?";
}

result<std::vector<token_id>> tokenize_prompt(const rendered_prompt& prompt, const tokenizer& tok) {
    std::vector<token_id> ids;
    ids.reserve(prompt.text.size() / 3 + 8);
    const std::string_view text = prompt.text;
    for (const auto& piece : prompt.pieces) {
        std::string_view bytes = text.substr(piece.begin, piece.end - piece.begin);
        if (!piece.special) {
            tok.encode_append(bytes, &ids);
            continue;
        }
        auto id = tok.added_token_id(bytes);
        if (!id) {
            return make_error(error_code::invalid_argument,
                              "the tokenizer has no added token '" + std::string(bytes) +
                                  "' that the DeepSeek-V4 prompt format needs");
        }
        ids.push_back(*id);
    }
    return ids;
}

namespace chat_detail {

const std::string_view effort_absolute_maximum =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

const std::string_view effort_beyond_maximum =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

std::string_view effort_prefix(reasoning_effort effort) {
    switch (effort) {
        case reasoning_effort::high:
        case reasoning_effort::xhigh: return effort_absolute_maximum;
        case reasoning_effort::max: return effort_beyond_maximum;
        case reasoning_effort::unset:
        case reasoning_effort::low: return {};
    }
    return {};
}

void append_template(rendered_prompt* p, std::string_view text) {
    static constexpr std::string_view specials[] = {dsml, think_open, think_close};
    size_t at = 0;
    while (at < text.size()) {
        size_t best = std::string_view::npos;
        std::string_view which;
        for (std::string_view s : specials) {
            size_t f = text.find(s, at);
            if (f < best) best = f, which = s;
        }
        if (best == std::string_view::npos) break;
        p->append_text(text.substr(at, best - at));
        p->append_special(which);
        at = best + which.size();
    }
    p->append_text(text.substr(at));
}

void append_tools_block(rendered_prompt* p, const std::vector<std::string>& schema_lines) {
    append_template(p,
        "## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
        "can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n<｜DSML｜parameter "
        "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
        "...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>\n\nString parameters should be specified as is and set "
        "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the "
        "value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled "
        "(triggered by <think>), you MUST output your complete reasoning inside "
        "<think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output "
        "directly after </think> with tool calls or final response.\n\n### Available Tool "
        "Schemas\n\n");
    for (size_t i = 0; i < schema_lines.size(); ++i) {
        if (i) p->append_text("\n");
        p->append_text(schema_lines[i]);
    }
    p->append_text("\n\nYou MUST strictly follow the above defined tool name and parameter "
                   "schemas to invoke tool calls.\n");
}

namespace {

// encode_arguments_to_dsml: a JSON object gives one parameter per key; anything else is one
// string parameter named "arguments" holding the raw text.
void append_parameters(rendered_prompt* p, std::string_view arguments, json_number_style style,
                       bool recipe_layout) {
    auto parsed = json_parse(arguments);
    json_value args;
    if (parsed && parsed->is_object()) {
        args = std::move(parsed).value();
    } else {
        args.type = json_value::kind::object;
        args.set("arguments", json_value::make_string(std::string(arguments)));
    }
    for (size_t i = 0; i < args.members.size(); ++i) {
        const auto& [key, value] = args.members[i];
        if (i > 0 && !recipe_layout) p->append_text("\n");
        p->append_text("<");
        p->append_special(dsml);
        p->append_text("parameter name=\"" + key + "\" string=\"" +
                       (value.is_string() ? "true" : "false") + "\">");
        p->append_text(value.is_string() ? value.text : json_dump(value, style));
        p->append_text("</");
        p->append_special(dsml);
        p->append_text("parameter>");
        if (recipe_layout) p->append_text("\n");
    }
    if (!recipe_layout) p->append_text("\n");
}

}  // namespace

void append_tool_calls(rendered_prompt* p, const std::vector<chat_tool_call>& calls,
                       json_number_style style, bool recipe_layout) {
    p->append_text("\n\n<");
    p->append_special(dsml);
    p->append_text("tool_calls>\n");
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i) p->append_text("\n");
        p->append_text("<");
        p->append_special(dsml);
        p->append_text("invoke name=\"" + calls[i].name + "\">\n");
        append_parameters(p, calls[i].arguments, style, recipe_layout);
        p->append_text("</");
        p->append_special(dsml);
        p->append_text("invoke>");
    }
    p->append_text("\n</");
    p->append_special(dsml);
    p->append_text("tool_calls>");
}

void append_tool_result(rendered_prompt* p, std::string_view content) {
    p->append_text("<tool_result>");
    p->append_text(content);
    p->append_text("</tool_result>");
}

std::vector<const chat_message*> sort_tool_results(std::vector<const chat_message*> results,
                                                   const chat_message* last_caller) {
    if (results.size() < 2 || last_caller == nullptr) return results;
    std::unordered_map<std::string, int64_t> order;
    for (size_t i = 0; i < last_caller->tool_calls.size(); ++i) {
        if (!last_caller->tool_calls[i].id.empty()) {
            order[last_caller->tool_calls[i].id] = static_cast<int64_t>(i);  // last wins
        }
    }
    if (order.empty()) return results;
    auto key = [&](const chat_message* m) {
        auto it = order.find(m->tool_call_id);
        return it == order.end() ? int64_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const chat_message* a, const chat_message* b) { return key(a) < key(b); });
    return results;
}

}  // namespace chat_detail
}  // namespace tandem::text

namespace tandem::text::chat_detail {

void sort_turn_blocks(std::vector<user_block>* blocks, const chat_message* last_caller) {
    std::vector<const chat_message*> tools;
    for (const auto& b : *blocks) {
        if (b.tool) tools.push_back(b.tool);
    }
    tools = sort_tool_results(std::move(tools), last_caller);
    size_t next = 0;
    for (auto& b : *blocks) {
        if (b.tool) b.tool = tools[next++];
    }
}

}  // namespace tandem::text::chat_detail
