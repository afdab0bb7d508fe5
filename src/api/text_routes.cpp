#include "api/text_routes.h"

#include <fmt/format.h>

#include "api/json_body.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "http/router.h"
#include "text/chat.h"

namespace tandem::api {
namespace {

using simdjson::dom::element;

std::shared_ptr<const text::tokenizer> tokenizer_or_503(app_state& app, const http::responder& out) {
    auto tok = app.tokenizer();
    if (!tok) {
        http::send_error(out, 503, "the tokenizer is not loaded yet: " + app.state_detail(),
                         "unavailable_error", {{"Retry-After", "1"}});
    }
    return tok;
}

void write_ids(json_writer& w, const std::vector<text::token_id>& ids) {
    w.begin_array();
    for (text::token_id t : ids) w.value(static_cast<int64_t>(t));
    w.end_array();
}

}  // namespace

void handle_tokenize(app_state& app, const http::request& req, const http::responder& out) {
    auto tok = tokenizer_or_503(app, out);
    if (!tok) return;
    simdjson::dom::parser parser;
    auto obj_or = json_object_or_400(parser, req, out);
    if (!obj_or) return;
    simdjson::dom::object obj = *obj_or;
    std::vector<text::token_id> ids;
    element el;
    if (!obj["messages"].get(el)) {
        auto chat = text::chat_request_from_openai_json(req.body);
        if (!chat) return send_status_error(out, chat.error());
        auto prompt = text::render_chat(*chat);
        if (!prompt) return send_status_error(out, prompt.error());
        auto tokens = text::tokenize_prompt(*prompt, *tok);
        if (!tokens) return send_status_error(out, tokens.error());
        ids = std::move(*tokens);
    } else if (!obj["prompt"].get(el)) {
        if (!el.is_string()) {
            return send_status_error(out, make_error(error_code::invalid_argument, "'prompt' must be a string"));
        }
        // A raw prompt is the caller's own model input: added-token strings are special tokens
        // here (as in vLLM). Chat content never takes this path.
        ids = tok->encode_with_added_tokens(el.get_string().value());
    } else {
        return send_status_error(out, make_error(error_code::invalid_argument,
                                                 "expected 'prompt' (a string) or 'messages'"));
    }
    json_writer w;
    w.begin_object().key("tokens");
    write_ids(w, ids);
    w.key("count").value(static_cast<int64_t>(ids.size()));
    if (engine::engine* e = app.engine()) w.key("max_model_len").value(e->max_context_tokens());
    out.send({200, {}, w.end_object().take()});
}

void handle_detokenize(app_state& app, const http::request& req, const http::responder& out) {
    auto tok = tokenizer_or_503(app, out);
    if (!tok) return;
    simdjson::dom::parser parser;
    auto body = json_object_or_400(parser, req, out);
    if (!body) return;
    element el;
    if ((*body)["tokens"].get(el)) {
        return send_status_error(out, make_error(error_code::invalid_argument,
                                                 "'tokens' must be an array of token ids"));
    }
    auto ids = read_token_ids(el, "tokens", tok->id_count());
    if (!ids) return send_status_error(out, ids.error());
    auto textv = tok->decode(*ids);
    if (!textv) return send_status_error(out, textv.error());
    json_writer w;
    w.begin_object().key("prompt").value(*textv).end_object();
    out.send({200, {}, w.take()});
}

void handle_render(app_state& app, const http::request& req, const http::responder& out) {
    auto tok = tokenizer_or_503(app, out);
    if (!tok) return;
    simdjson::dom::parser parser;
    auto body = json_object_or_400(parser, req, out);  // a clear 400 for invalid JSON first
    if (!body) return;
    auto chat = text::chat_request_from_openai_json(req.body);
    if (!chat) return send_status_error(out, chat.error());
    auto prompt = text::render_chat(*chat);
    if (!prompt) return send_status_error(out, prompt.error());
    auto tokens = text::tokenize_prompt(*prompt, *tok);
    if (!tokens) return send_status_error(out, tokens.error());
    json_writer w;
    w.begin_object().key("prompt").value(prompt->text).key("tokens");
    write_ids(w, *tokens);
    out.send({200, {}, w.end_object().take()});
}

}  // namespace tandem::api
