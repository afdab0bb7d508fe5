// text/chat_request.cpp — OpenAI chat-completions JSON -> chat_request.
//
// Only what shapes the prompt is read; sampling fields are the API layer's business. Every
// error names the field, e.g. "messages[1].tool_calls[0].function.arguments: must be a string".
#include <algorithm>
#include <cctype>
#include <set>

#include "text/chat.h"
#include "text/json_value.h"
#include "text/schema_rules.h"

namespace tandem::text {

namespace {

status request_error(const std::string& what) { return make_error(error_code::invalid_argument, what); }

// A body that does not deserialize into DeepSeek's request type: its words for it.
status body_error(const std::string& field, const std::string& what) {
    return request_error("invalid request body: " + what).with_param(field);
}

status field_error(const std::string& field, const std::string& what) {
    status st = make_error(error_code::invalid_argument, field + ": " + what);
    return field == "request body" ? st : st.with_param(field);
}

// A string, or an array of content parts whose text parts are joined by "\n\n". Images are
// not supported by this server; in tool results they render as "[Unsupported Image]", as the
// official API does.
status read_content(const json_value* v, const std::string& field, bool is_tool, std::string* out,
                    bool* present) {
    *present = v != nullptr && v->type != json_value::kind::null;
    if (!*present) return status::ok();
    if (v->is_string()) {
        *out = v->text;
        return status::ok();
    }
    if (v->type != json_value::kind::array) return field_error(field, "must be a string, an array of parts or null");
    std::vector<std::string> parts;
    for (size_t i = 0; i < v->items.size(); ++i) {
        const json_value& part = v->items[i];
        const std::string pf = field + "[" + std::to_string(i) + "]";
        const json_value* type = part.find("type");
        if (type == nullptr || !type->is_string()) return field_error(pf + ".type", "missing");
        if (type->text == "text") {
            const json_value* text = part.find("text");
            if (text == nullptr || !text->is_string()) return field_error(pf + ".text", "must be a string");
            parts.push_back(text->text);
        } else if (is_tool && type->text == "image_url") {
            parts.push_back("[Unsupported Image]");
        } else {
            return field_error(pf + ".type", "'" + type->text + "' is not supported");
        }
    }
    out->clear();
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i) *out += "\n\n";
        *out += parts[i];
    }
    return status::ok();
}

status read_string(const json_value& obj, std::string_view key, const std::string& field,
                   bool required, std::string* out) {
    const json_value* v = obj.find(key);
    if (v == nullptr || v->type == json_value::kind::null) {
        return required ? field_error(field, "missing") : status::ok();
    }
    if (!v->is_string()) return field_error(field, "must be a string");
    *out = v->text;
    return status::ok();
}

status read_tool_calls(const json_value& msg, const std::string& field, bool official, chat_message* m) {
    const json_value* calls = msg.find("tool_calls");
    if (calls == nullptr || calls->type == json_value::kind::null) return status::ok();
    if (calls->type != json_value::kind::array) return field_error(field, "must be an array");
    if (calls->items.empty() && !official) return field_error(field, "must not be an empty array");
    for (size_t i = 0; i < calls->items.size(); ++i) {
        const json_value& c = calls->items[i];
        const std::string cf = field + "[" + std::to_string(i) + "]";
        if (!c.is_object()) return field_error(cf, "must be an object");
        if (!official) {
            const json_value* type = c.find("type");
            if (type == nullptr || type->type == json_value::kind::null) return body_error(cf + ".type", "missing field `type`");
            if (!type->is_string() || type->text != "function") {
                return body_error(cf + ".type", "unknown variant `" + (type->is_string() ? type->text : std::string("?")) +
                                                    "`, expected `function`");
            }
        }
        chat_tool_call call;
        TANDEM_RETURN_IF_ERROR(read_string(c, "id", cf + ".id", false, &call.id));
        const json_value* fn = c.find("function");
        if (fn == nullptr || !fn->is_object()) return field_error(cf + ".function", "missing");
        TANDEM_RETURN_IF_ERROR(read_string(*fn, "name", cf + ".function.name", true, &call.name));
        TANDEM_RETURN_IF_ERROR(read_string(*fn, "arguments", cf + ".function.arguments", true, &call.arguments));
        m->tool_calls.push_back(std::move(call));
    }
    return status::ok();
}

result<chat_role> read_role(const json_value& msg, const std::string& field) {
    std::string role;
    TANDEM_RETURN_IF_ERROR(read_string(msg, "role", field + ".role", true, &role));
    if (role == "system") return chat_role::system;
    if (role == "user") return chat_role::user;
    if (role == "assistant") return chat_role::assistant;
    if (role == "tool") return chat_role::tool;
    if (role == "latest_reminder") return chat_role::latest_reminder;
    if (role == "developer") return chat_role::developer;
    return field_error(field + ".role", "unknown role '" + role + "'");
}

// The message-level keys of encoding_dsv4.py, for render_messages_official().
status read_official_keys(const json_value& msg, const std::string& field, chat_message* m) {
    if (const json_value* tools = msg.find("tools"); tools && tools->type == json_value::kind::array) {
        for (const json_value& t : tools->items) m->tools.push_back(json_dump(t, json_number_style::python));
    }
    if (const json_value* rf = msg.find("response_format"); rf && rf->type != json_value::kind::null) {
        m->response_format = json_dump(*rf, json_number_style::python);
    }
    std::string task;
    TANDEM_RETURN_IF_ERROR(read_string(msg, "task", field + ".task", false, &task));
    if (!task.empty()) m->task = task;
    if (const json_value* w = msg.find("wo_eos"); w && w->type == json_value::kind::boolean) m->wo_eos = w->boolean;
    return status::ok();
}

result<chat_message> read_message(const json_value& msg, const std::string& field, bool official) {
    if (!msg.is_object()) return field_error(field, "must be an object");
    chat_message m;
    auto role = read_role(msg, field);
    if (!role) return role.error();
    m.role = *role;
    bool has_content = false;
    TANDEM_RETURN_IF_ERROR(read_content(msg.find("content"), field + ".content",
                                        m.role == chat_role::tool, &m.content, &has_content));
    TANDEM_RETURN_IF_ERROR(read_string(msg, "name", field + ".name", false, &m.name));
    if (!has_content && m.role != chat_role::assistant) {
        return field_error(field + ".content", "must be a string or an array of content parts");
    }
    if (m.role == chat_role::assistant) {
        std::string rc;
        const json_value* rcv = msg.find("reasoning_content");
        TANDEM_RETURN_IF_ERROR(read_string(msg, "reasoning_content", field + ".reasoning_content", false, &rc));
        if (rcv && rcv->type != json_value::kind::null) m.reasoning_content = rc;
        TANDEM_RETURN_IF_ERROR(read_tool_calls(msg, field + ".tool_calls", official, &m));
        if (!has_content && m.tool_calls.empty()) {
            return field_error(field, "an assistant message needs content or tool_calls");
        }
        if (const json_value* prefix = msg.find("prefix")) {
            if (prefix->type != json_value::kind::boolean) return field_error(field + ".prefix", "must be a boolean");
            m.prefix = prefix->boolean;
        }
    }
    if (m.role == chat_role::tool) {
        TANDEM_RETURN_IF_ERROR(read_string(msg, "tool_call_id", field + ".tool_call_id", !official, &m.tool_call_id));
    }
    if (official) TANDEM_RETURN_IF_ERROR(read_official_keys(msg, field, &m));
    return m;
}

bool is_tool_name(const std::string& name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-';
    });
}

// DeepSeek's rules for one tool: a name of [a-zA-Z0-9_-]+, unique; parameters that are a valid
// object schema, or (strict) that fit the API's strict schema model.
status check_tool_function(const json_value& fn, const std::string& field, std::set<std::string>* names) {
    const std::string& name = fn.find("name")->text;
    if (!is_tool_name(name)) {
        return request_error("Invalid '" + field + ".function.name': string does not match pattern. Expected a "
                             "string that matches the pattern '^[a-zA-Z0-9_-]+$'.")
            .with_param(field + ".function.name");
    }
    if (!names->insert(name).second) return request_error("Tool names must be unique.").with_param("tools");
    const json_value* params = fn.find("parameters");
    if (params && params->type == json_value::kind::null) params = nullptr;
    const json_value* strict = fn.find("strict");
    if (strict && strict->type == json_value::kind::boolean && strict->boolean) {
        auto normalized = normalize_strict_parameters(params);
        return normalized ? status::ok() : normalized.error().with_param(field + ".function.parameters");
    }
    if (params == nullptr) return status::ok();
    return check_schema(*params, "Invalid schema for function '" + name + "'", true)
        .with_param(field + ".function.parameters");
}

status read_tools(const json_value& body, chat_request* req) {
    std::set<std::string> names;
    const json_value* tools = body.find("tools");
    if (tools == nullptr || tools->type == json_value::kind::null) return status::ok();
    if (tools->type != json_value::kind::array) return field_error("tools", "must be an array");
    for (size_t i = 0; i < tools->items.size(); ++i) {
        const std::string tf = "tools[" + std::to_string(i) + "]";
        const json_value* type = tools->items[i].find("type");
        if (type == nullptr || !type->is_string() || type->text != "function") {
            return field_error(tf + ".type", "must be \"function\"");
        }
        const json_value* fn = tools->items[i].find("function");
        if (fn == nullptr || !fn->is_object()) return field_error(tf + ".function", "missing");
        const json_value* name = fn->find("name");
        if (name == nullptr || !name->is_string() || name->text.empty()) {
            return field_error(tf + ".function.name", "must be a non-empty string");
        }
        TANDEM_RETURN_IF_ERROR(check_tool_function(*fn, tf, &names));
        req->tools.push_back(json_dump(*fn, json_number_style::python));
    }
    return status::ok();
}

status read_tool_choice(const json_value& body, chat_request* req) {
    const json_value* tc = body.find("tool_choice");
    if (tc == nullptr || tc->type == json_value::kind::null) return status::ok();
    if (tc->is_string()) {
        if (tc->text == "auto") req->tool_choice = tool_choice_kind::automatic;
        else if (tc->text == "none") req->tool_choice = tool_choice_kind::none;
        else if (tc->text == "required") req->tool_choice = tool_choice_kind::required;
        else return field_error("tool_choice", "must be auto, none, required or a function");
        return status::ok();
    }
    const json_value* fn = tc->find("function");
    if (fn == nullptr) return field_error("tool_choice.function", "missing");
    req->tool_choice = tool_choice_kind::named;
    return read_string(*fn, "name", "tool_choice.function.name", true, &req->tool_choice_name);
}

// vLLM/SGLang clients switch thinking with chat_template_kwargs {"thinking": bool} (or
// "enable_thinking"); it counts as an explicit choice, like a thinking object.
status read_template_thinking(const json_value& body, std::string* type) {
    const json_value* kw = body.find("chat_template_kwargs");
    if (kw == nullptr || kw->type == json_value::kind::null) return status::ok();
    if (kw->type != json_value::kind::object) {
        return field_error("chat_template_kwargs", "must be an object");
    }
    for (const char* key : {"thinking", "enable_thinking"}) {
        const json_value* v = kw->find(key);
        if (v == nullptr || v->type == json_value::kind::null) continue;
        if (v->type != json_value::kind::boolean) {
            return field_error(std::string("chat_template_kwargs.") + key, "must be a boolean");
        }
        *type = v->boolean ? "enabled" : "disabled";
    }
    return status::ok();
}

size_t member_index(const json_value& obj, std::string_view key) {
    for (size_t i = 0; i < obj.members.size(); ++i) {
        if (obj.members[i].first == key) return i;
    }
    return obj.members.size();
}

status read_thinking(const json_value& body, chat_request* req) {
    // An explicit thinking object (or chat_template_kwargs.thinking) decides the mode;
    // reasoning_effort "none" only applies when neither is present (so {"type": "enabled"}
    // with "none" thinks at the default effort).
    std::string type;
    TANDEM_RETURN_IF_ERROR(read_template_thinking(body, &type));
    std::string effort;
    TANDEM_RETURN_IF_ERROR(read_string(body, "reasoning_effort", "reasoning_effort", false, &effort));
    status effort_error = reasoning_effort_from_name(effort) ? status::ok() : apply_thinking("", effort, "reasoning_effort", req);
    if (const json_value* th = body.find("thinking"); th && th->type != json_value::kind::null) {
        TANDEM_RETURN_IF_ERROR(read_string(*th, "type", "thinking.type", true, &type));
        if (type != "enabled" && type != "adaptive" && type != "disabled") {
            // Both wrong: the one earlier in the body is reported, as a deserializer would.
            if (!effort_error && member_index(body, "reasoning_effort") < member_index(body, "thinking")) return effort_error;
            return body_error("thinking.type", "unknown variant `" + type + "`, expected one of `adaptive`, `enabled`, `disabled`");
        }
    }
    return apply_thinking(type, effort, "reasoning_effort", req);
}

bool mentions_json(const chat_request& req) {
    for (const chat_message& m : req.messages) {
        std::string lower = m.content;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (lower.find("json") != std::string::npos) return true;
    }
    return false;
}

status read_response_format(const json_value& body, chat_request* req) {
    const json_value* rf = body.find("response_format");
    if (rf == nullptr || rf->type == json_value::kind::null) return status::ok();
    std::string type;
    TANDEM_RETURN_IF_ERROR(read_string(*rf, "type", "response_format.type", true, &type));
    if (type == "text") return status::ok();
    if (type == "json_object") {
        if (!mentions_json(*req)) {
            return make_error(error_code::invalid_argument,
                              "Prompt must contain the word 'json' in some form to use 'response_format' of "
                              "type 'json_object'.")
                .with_param("response_format");
        }
        req->response_format = response_format_kind::json_object;
        return status::ok();
    }
    if (type != "json_schema") return field_error("response_format.type", "must be text, json_object or json_schema");
    const json_value* js = rf->find("json_schema");
    const json_value* schema = js && js->is_object() ? js->find("schema") : nullptr;
    if (schema == nullptr) return field_error("response_format.json_schema.schema", "missing field `schema`");
    TANDEM_RETURN_IF_ERROR(check_schema(*schema, "Invalid json schema", false).with_param("response_format.json_schema.schema"));
    req->response_format = response_format_kind::json_schema;
    req->response_schema = json_dump(*schema, json_number_style::python);
    return status::ok();
}

}  // namespace

std::optional<reasoning_effort> reasoning_effort_from_name(std::string_view name) {
    if (name == "none") return reasoning_effort::unset;
    if (name == "minimal" || name == "low") return reasoning_effort::low;
    if (name.empty() || name == "medium" || name == "high") return reasoning_effort::high;
    if (name == "xhigh") return reasoning_effort::xhigh;
    if (name == "ultra" || name == "max") return reasoning_effort::max;
    return std::nullopt;
}

status apply_thinking(std::string_view thinking_type, std::string_view effort_name,
                      const std::string& effort_field, chat_request* req) {
    // An explicit thinking type decides the mode; effort "none" only turns thinking off when
    // no type was given (so {"type": "enabled"} with "none" thinks at the default effort).
    auto effort = reasoning_effort_from_name(effort_name);
    if (!effort) {
        return body_error(effort_field, "unknown variant `" + std::string(effort_name) +
                                            "`, expected one of `none`, `minimal`, `low`, `medium`, "
                                            "`high`, `xhigh`, `ultra`, `max`");
    }
    req->thinking = thinking_type != "disabled" && !(thinking_type.empty() && *effort == reasoning_effort::unset);
    req->effort = *effort == reasoning_effort::unset ? reasoning_effort::high : *effort;
    if (!req->thinking) req->effort = reasoning_effort::unset;
    return status::ok();
}

result<chat_request> chat_request_from_openai_json(std::string_view body) {
    auto parsed = json_parse(body);
    if (!parsed) return parsed.error().with_context("request body");
    const json_value& root = *parsed;
    if (!root.is_object()) return field_error("request body", "must be a JSON object");
    const json_value* messages = root.find("messages");
    if (messages == nullptr || messages->type != json_value::kind::array) {
        return field_error("messages", "must be an array");
    }
    chat_request req;
    for (size_t i = 0; i < messages->items.size(); ++i) {
        auto m = read_message(messages->items[i], "messages[" + std::to_string(i) + "]", false);
        if (!m) return m.error();
        // OpenAI's developer role is the system role of models without one.
        if (m->role == chat_role::developer) m->role = chat_role::system;
        req.messages.push_back(std::move(m).value());
    }
    // DeepSeek's API deserializes the whole body before its rules run: shape errors come first.
    TANDEM_RETURN_IF_ERROR(read_thinking(root, &req));
    TANDEM_RETURN_IF_ERROR(read_tools(root, &req));
    TANDEM_RETURN_IF_ERROR(read_tool_choice(root, &req));
    // As OpenAI (deepseek-recipe accepts it and ignores the choice): nothing to force a call to.
    if (req.tools.empty() && (req.tool_choice == tool_choice_kind::required ||
                              req.tool_choice == tool_choice_kind::named)) {
        return field_error("tool_choice", "'tool_choice' is only allowed when 'tools' are specified");
    }
    TANDEM_RETURN_IF_ERROR(read_response_format(root, &req));
    return req;
}

}  // namespace tandem::text

namespace tandem::text {

result<std::vector<chat_message>> chat_messages_from_json(std::string_view messages_json) {
    auto parsed = json_parse(messages_json);
    if (!parsed) return parsed.error().with_context("messages");
    if (parsed->type != json_value::kind::array) return field_error("messages", "must be an array");
    std::vector<chat_message> out;
    for (size_t i = 0; i < parsed->items.size(); ++i) {
        auto m = read_message(parsed->items[i], "messages[" + std::to_string(i) + "]", true);
        if (!m) return m.error();
        out.push_back(std::move(m).value());
    }
    return out;
}

}  // namespace tandem::text
