// api/messages_request.cpp — Anthropic Messages JSON → chat_request + generation options.
//
// Content blocks are folded into the chat messages the OpenAI endpoint would have received;
// the Anthropic-only rules (every tool_use answered by a tool_result at the start of the next
// user message, non-empty content, client tools only) are checked here with DeepSeek's
// messages, everything else by the chat pipeline.
#include "api/messages_request.h"

#include <fmt/format.h>

#include <regex>
#include <set>

#include "text/json_value.h"

namespace tandem::api {
namespace {

using text::json_value;

status field_error(const std::string& field, const std::string& what) {
    return make_error(error_code::invalid_argument, field + ": " + what).with_param(field);
}

const json_value* non_null(const json_value& obj, std::string_view key) {
    const json_value* v = obj.find(key);
    return v && v->type != json_value::kind::null ? v : nullptr;
}

status read_string(const json_value& obj, std::string_view key, const std::string& field,
                   bool required, std::string* out) {
    const json_value* v = non_null(obj, key);
    if (v == nullptr) return required ? field_error(field, "missing") : status::ok();
    if (!v->is_string()) return field_error(field, "must be a string");
    *out = v->text;
    return status::ok();
}

std::string join(const std::vector<std::string>& parts) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? "\n\n" : "") + parts[i];
    return out;
}

// Image and document blocks: this server reads text only; they render as the placeholder
// DeepSeek's API uses when it cannot read them.
std::string unsupported_block(const json_value& block, const std::string& type) {
    if (type == "image") return "[Unsupported Image]";
    std::string media;
    if (const json_value* src = non_null(block, "source")) {
        if (const json_value* m = non_null(*src, "media_type"); m && m->is_string()) media = m->text;
    }
    return fmt::format("[Unsupported document type: {}]", media);
}

// A text block's text, or an image/document block's placeholder.
result<std::string> read_text_block(const json_value& block, const std::string& field) {
    std::string type;
    TANDEM_RETURN_IF_ERROR(read_string(block, "type", field + ".type", true, &type));
    if (type == "image" || type == "document") return unsupported_block(block, type);
    if (type != "text") return field_error(field + ".type", fmt::format("'{}' is not supported here", type));
    std::string text;
    TANDEM_RETURN_IF_ERROR(read_string(block, "text", field + ".text", true, &text));
    return text;
}

// A string, or an array of text (and image/document) blocks joined by "\n\n".
result<std::string> read_text_content(const json_value& v, const std::string& field) {
    if (v.is_string()) return v.text;
    if (v.type != json_value::kind::array) return field_error(field, "must be a string or an array of content blocks");
    std::vector<std::string> parts;
    for (size_t i = 0; i < v.items.size(); ++i) {
        auto text = read_text_block(v.items[i], fmt::format("{}.{}", field, i));
        if (!text) return text.error();
        parts.push_back(std::move(*text));
    }
    return join(parts);
}

status read_system(const json_value& root, text::chat_request* req) {
    const json_value* sys = non_null(root, "system");
    if (sys == nullptr) return status::ok();
    auto text = read_text_content(*sys, "system");
    if (!text) return text.error();
    text::chat_message m;
    m.role = text::chat_role::system;
    m.content = std::move(*text);
    req->messages.push_back(std::move(m));
    return status::ok();
}

// One user message: its leading tool_result blocks answer `pending` (the previous assistant's
// tool_use ids, all of which must be answered), the rest is user text. Tool results keep all
// their text blocks (joined by "\n\n", empty ones too); user text blocks drop empty ones.
status read_user(const json_value& content, const std::string& field, std::set<std::string>* pending,
                 text::chat_request* req) {
    if (content.is_string()) {
        if (!pending->empty()) return status::ok();  // reported by the caller
        text::chat_message m;
        m.content = content.text;
        req->messages.push_back(std::move(m));
        return status::ok();
    }
    bool had_text = false;
    for (size_t i = 0; i < content.items.size(); ++i) {
        const json_value& block = content.items[i];
        const std::string bf = fmt::format("{}.{}", field, i);
        std::string type;
        TANDEM_RETURN_IF_ERROR(read_string(block, "type", bf + ".type", true, &type));
        if (type != "tool_result") {
            // Each block is a user message of its own: the chat renderer merges consecutive
            // user messages, dropping empty ones, as DeepSeek's converter does.
            auto one = read_text_block(block, bf);
            if (!one) return one.error();
            text::chat_message m;
            m.content = std::move(*one);
            req->messages.push_back(std::move(m));
            had_text = true;
            continue;
        }
        text::chat_message tool;
        tool.role = text::chat_role::tool;
        TANDEM_RETURN_IF_ERROR(read_string(block, "tool_use_id", bf + ".tool_use_id", true, &tool.tool_call_id));
        if (had_text || pending->erase(tool.tool_call_id) == 0) {
            return field_error(bf, fmt::format("tool_result '{}' does not directly answer a tool_use of the "
                                               "previous assistant message", tool.tool_call_id));
        }
        if (const json_value* c = non_null(block, "content")) {
            auto text = read_text_content(*c, bf + ".content");
            if (!text) return text.error();
            tool.content = std::move(*text);
        }
        req->messages.push_back(std::move(tool));
    }
    return status::ok();
}

status read_assistant(const json_value& content, const std::string& field, std::set<std::string>* pending,
                      text::chat_request* req) {
    text::chat_message m;
    m.role = text::chat_role::assistant;
    if (content.is_string()) {
        m.content = content.text;
        req->messages.push_back(std::move(m));
        return status::ok();
    }
    std::vector<std::string> texts, thoughts;
    for (size_t i = 0; i < content.items.size(); ++i) {
        const json_value& block = content.items[i];
        const std::string bf = fmt::format("{}.{}", field, i);
        std::string type;
        TANDEM_RETURN_IF_ERROR(read_string(block, "type", bf + ".type", true, &type));
        if (type == "text") {
            texts.emplace_back();
            TANDEM_RETURN_IF_ERROR(read_string(block, "text", bf + ".text", true, &texts.back()));
        } else if (type == "thinking") {
            thoughts.emplace_back();
            TANDEM_RETURN_IF_ERROR(read_string(block, "thinking", bf + ".thinking", true, &thoughts.back()));
        } else if (type == "tool_use") {
            text::chat_tool_call call;
            TANDEM_RETURN_IF_ERROR(read_string(block, "id", bf + ".id", true, &call.id));
            TANDEM_RETURN_IF_ERROR(read_string(block, "name", bf + ".name", true, &call.name));
            const json_value* input = non_null(block, "input");
            if (input == nullptr || !input->is_object()) return field_error(bf + ".input", "must be an object");
            call.arguments = text::json_dump(*input, text::json_number_style::python);
            pending->insert(call.id);
            m.tool_calls.push_back(std::move(call));
        } else {
            return field_error(bf + ".type", fmt::format("'{}' is not supported in an assistant message", type));
        }
    }
    m.content = join(texts);
    if (!thoughts.empty()) m.reasoning_content = join(thoughts);
    req->messages.push_back(std::move(m));
    return status::ok();
}

status read_messages(const json_value& root, text::chat_request* req) {
    const json_value* messages = non_null(root, "messages");
    if (messages == nullptr || messages->type != json_value::kind::array) return field_error("messages", "must be an array");
    if (messages->items.empty()) return field_error("messages", "at least one message is required");
    std::set<std::string> pending;  // tool_use ids the next message must answer
    for (size_t i = 0; i < messages->items.size(); ++i) {
        const json_value& msg = messages->items[i];
        const std::string field = fmt::format("messages.{}", i);
        if (!msg.is_object()) return field_error(field, "must be an object");
        std::string role;
        TANDEM_RETURN_IF_ERROR(read_string(msg, "role", field + ".role", true, &role));
        const json_value* content = non_null(msg, "content");
        if (content == nullptr || (!content->is_string() && content->type != json_value::kind::array)) {
            return field_error(field + ".content", "must be a string or an array of content blocks");
        }
        if (content->type == json_value::kind::array && content->items.empty()) {
            return field_error(field, "all messages must have non-empty content");
        }
        const bool answers = !pending.empty();
        if (role == "user") {
            TANDEM_RETURN_IF_ERROR(read_user(*content, field + ".content", &pending, req));
        } else if (role == "assistant") {
            if (!answers) TANDEM_RETURN_IF_ERROR(read_assistant(*content, field + ".content", &pending, req));
        } else {
            return field_error(field + ".role", fmt::format("'{}' is not a role; use 'user' or 'assistant' (and 'system')", role));
        }
        if (answers && !pending.empty()) {
            std::string ids;
            for (const std::string& id : pending) ids += (ids.empty() ? "" : ", ") + id;
            return field_error(field, fmt::format("`tool_use` ids were found without `tool_result` blocks immediately "
                                                  "after: {}. Each `tool_use` block must have a corresponding "
                                                  "`tool_result` block in the next message.", ids));
        }
    }
    if (!pending.empty()) {
        return field_error("messages", "the last assistant message has tool_use blocks without tool_result blocks");
    }
    return status::ok();
}

status read_tools(const json_value& root, text::chat_request* req) {
    const json_value* tools = non_null(root, "tools");
    if (tools == nullptr) return status::ok();
    if (tools->type != json_value::kind::array) return field_error("tools", "must be an array");
    static const std::regex name_pattern("^[a-zA-Z0-9_-]+$");
    for (size_t i = 0; i < tools->items.size(); ++i) {
        const json_value& t = tools->items[i];
        const std::string field = fmt::format("tools.{}", i);
        if (!t.is_object()) return field_error(field, "must be an object");
        std::string type = "custom";
        TANDEM_RETURN_IF_ERROR(read_string(t, "type", field + ".type", false, &type));
        const json_value* schema = non_null(t, "input_schema");
        if (type != "custom" || schema == nullptr) return field_error(field, "server tools are not supported");
        std::string name;
        TANDEM_RETURN_IF_ERROR(read_string(t, "name", field + ".name", true, &name));
        if (!std::regex_match(name, name_pattern)) {
            return field_error(field + ".name", "string does not match pattern. Expected a string that matches "
                                                "the pattern '^[a-zA-Z0-9_-]+$'.");
        }
        if (!schema->is_object()) return field_error(field + ".input_schema", "must be an object");
        json_value fn;
        fn.type = json_value::kind::object;
        fn.set("name", json_value::make_string(name));
        if (const json_value* d = non_null(t, "description")) {
            if (!d->is_string()) return field_error(field + ".description", "must be a string");
            fn.set("description", *d);
        }
        fn.set("parameters", *schema);
        req->tools.push_back(text::json_dump(fn, text::json_number_style::python));
    }
    return status::ok();
}

status read_tool_choice(const json_value& root, text::chat_request* req) {
    const json_value* tc = non_null(root, "tool_choice");
    if (tc == nullptr) return status::ok();
    if (!tc->is_object()) return field_error("tool_choice", "must be an object");
    std::string type;
    TANDEM_RETURN_IF_ERROR(read_string(*tc, "type", "tool_choice.type", true, &type));
    // As DeepSeek's converter: "any" prompts like "auto" (the API does not open the call block
    // for it), "tool" offers only that tool and opens the block; without tools both are "auto".
    if (type == "auto" || type == "any") {
        req->tool_choice = text::tool_choice_kind::automatic;
    } else if (type == "none") {
        req->tool_choice = text::tool_choice_kind::none;
    } else if (type == "tool") {
        std::string name;
        TANDEM_RETURN_IF_ERROR(read_string(*tc, "name", "tool_choice.name", true, &name));
        if (!req->tools.empty()) {
            req->tool_choice = text::tool_choice_kind::named;
            req->tool_choice_name = std::move(name);
        }
    } else {
        return field_error("tool_choice.type", "must be auto, any, tool or none");
    }
    return status::ok();
}

status read_thinking(const json_value& root, text::chat_request* req) {
    std::string type, effort;
    if (const json_value* th = non_null(root, "thinking")) {
        TANDEM_RETURN_IF_ERROR(read_string(*th, "type", "thinking.type", true, &type));
        if (type != "enabled" && type != "adaptive" && type != "disabled") {
            return field_error("thinking.type", "must be enabled, adaptive or disabled");
        }
    }
    if (const json_value* oc = non_null(root, "output_config")) {
        TANDEM_RETURN_IF_ERROR(read_string(*oc, "effort", "output_config.effort", false, &effort));
    }
    return text::apply_thinking(type, effort, "output_config.effort", req);
}

}  // namespace

result<messages_request> messages_request_from_json(std::string_view body,
                                                    const simdjson::dom::object& fields) {
    auto opts = parse_generation_options(fields, api_kind::chat, 0);
    if (!opts) return opts.error();
    auto parsed = text::json_parse(body);
    if (!parsed) return parsed.error().with_context("request body");
    const json_value& root = *parsed;
    if (!root.is_object()) return make_error(error_code::invalid_argument, "request body: must be a JSON object");
    messages_request out;
    out.opts = std::move(*opts);
    out.opts.n = 1;
    out.opts.stop.clear();           // Anthropic's field is stop_sequences
    out.opts.sampling.logprobs = -1;
    TANDEM_RETURN_IF_ERROR(read_system(root, &out.chat));
    TANDEM_RETURN_IF_ERROR(read_messages(root, &out.chat));
    TANDEM_RETURN_IF_ERROR(read_tools(root, &out.chat));
    TANDEM_RETURN_IF_ERROR(read_tool_choice(root, &out.chat));
    TANDEM_RETURN_IF_ERROR(read_thinking(root, &out.chat));
    if (const json_value* stops = non_null(root, "stop_sequences")) {
        if (stops->type != json_value::kind::array) return field_error("stop_sequences", "must be an array of strings");
        for (size_t i = 0; i < stops->items.size(); ++i) {
            const std::string field = fmt::format("stop_sequences.{}", i);
            if (!stops->items[i].is_string()) return field_error(field, "must be a string");
            if (stops->items[i].text.empty()) return field_error(field, "must not be empty");
            out.opts.stop.push_back(stops->items[i].text);
        }
    }
    return out;
}

}  // namespace tandem::api
