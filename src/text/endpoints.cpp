// text/endpoints.cpp — /tokenize, /detokenize and /v1/chat/completions/render bodies.
#include "text/endpoints.h"

#include "text/chat.h"
#include "text/json_value.h"

namespace tandem::text {

namespace {

void append_ids(const std::vector<token_id>& ids, std::string* out) {
    out->push_back('[');
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out->push_back(',');
        out->append(std::to_string(ids[i]));
    }
    out->push_back(']');
}

result<std::vector<token_id>> render_and_tokenize(std::string_view body, const tokenizer& tok,
                                                  std::string* prompt_text) {
    auto req = chat_request_from_openai_json(body);
    if (!req) return req.error();
    auto prompt = render_chat(*req);
    if (!prompt) return prompt.error();
    auto ids = tokenize_prompt(*prompt, tok);
    if (ids && prompt_text) *prompt_text = std::move(prompt->text);
    return ids;
}

}  // namespace

result<std::string> tokenize_endpoint(std::string_view body, const tokenizer& tok) {
    auto parsed = json_parse(body);
    if (!parsed) return parsed.error().with_context("request body");
    if (!parsed->is_object()) return make_error(error_code::invalid_argument, "request body: must be a JSON object");
    std::vector<token_id> ids;
    if (const json_value* prompt = parsed->find("prompt")) {
        if (!prompt->is_string()) return make_error(error_code::invalid_argument, "prompt: must be a string");
        ids = tok.encode_with_added_tokens(prompt->text);
    } else if (parsed->find("messages")) {
        auto rendered = render_and_tokenize(body, tok, nullptr);
        if (!rendered) return rendered.error();
        ids = std::move(rendered).value();
    } else {
        return make_error(error_code::invalid_argument, "request body: needs \"prompt\" or \"messages\"");
    }
    std::string out = "{\"tokens\":";
    append_ids(ids, &out);
    out += ",\"count\":" + std::to_string(ids.size()) + "}";
    return out;
}

result<std::string> detokenize_endpoint(std::string_view body, const tokenizer& tok) {
    auto parsed = json_parse(body);
    if (!parsed) return parsed.error().with_context("request body");
    const json_value* tokens = parsed->is_object() ? parsed->find("tokens") : nullptr;
    if (tokens == nullptr || tokens->type != json_value::kind::array) {
        return make_error(error_code::invalid_argument, "tokens: must be an array of token ids");
    }
    std::vector<token_id> ids;
    for (size_t i = 0; i < tokens->items.size(); ++i) {
        const json_value& t = tokens->items[i];
        const std::string where = "tokens[" + std::to_string(i) + "]";
        if (t.type != json_value::kind::number || t.text.find_first_of(".eE") != std::string::npos ||
            t.text.size() > 10) {
            return make_error(error_code::invalid_argument, where + ": must be an integer token id");
        }
        const long long id = std::stoll(t.text);
        if (!tok.contains(static_cast<token_id>(id)) || id > INT32_MAX || id < 0) {
            return make_error(error_code::invalid_argument, where + ": " + t.text + " is not in the vocabulary");
        }
        ids.push_back(static_cast<token_id>(id));
    }
    auto text = tok.decode(ids);
    if (!text) return text.error();
    std::string out = "{\"prompt\":";
    json_dump_string(*text, &out);
    out += "}";
    return out;
}

result<std::string> render_endpoint(std::string_view body, const tokenizer& tok) {
    std::string prompt;
    auto ids = render_and_tokenize(body, tok, &prompt);
    if (!ids) return ids.error();
    std::string out = "{\"prompt\":";
    json_dump_string(prompt, &out);
    out += ",\"tokens\":";
    append_ids(*ids, &out);
    out += "}";
    return out;
}

}  // namespace tandem::text
