// api/messages_routes.cpp — Anthropic's Messages API over the chat pipeline: the request is
// read by messages_request, rendered, sampled and parsed as a chat completion, and written by
// messages_writer.
#include "api/messages_routes.h"

#include <fmt/format.h>

#include "api/chat_pipeline.h"
#include "api/choice_session.h"
#include "api/grammar_jobs.h"
#include "api/json_body.h"
#include "api/messages_request.h"
#include "api/messages_writer.h"
#include "api/native_routes.h"
#include "api/openai_common.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "text/tokenizer.h"

namespace tandem::api {
namespace {

std::string anthropic_error_body(const status& st, int* http_status) {
    const api_error e = api_error_of(st);
    const char* type = "api_error";
    switch (e.http_status) {
        case 400: type = "invalid_request_error"; break;
        case 404: type = "not_found_error"; break;
        case 413: type = "request_too_large"; break;
        case 503: type = "overloaded_error"; break;
        default: break;
    }
    if (http_status) *http_status = e.http_status;
    json_writer w;
    w.begin_object().key("type").value("error").key("error").begin_object()
        .key("type").value(type).key("message").value(st.message()).end_object().end_object();
    return w.take();
}

class messages_session final : public choice_session {
public:
    std::unique_ptr<choice_text> output_text;
    std::unique_ptr<text::output_parser> parser;
    std::unique_ptr<messages_writer> writer;
    int64_t prompt_tokens = 0;

private:
    engine::finish_reason reason_ = engine::finish_reason::none;
    bool stopped_by_string_ = false;
    int64_t completion_tokens_ = 0;
    status error_;

    void on_stream_start() override {
        if (!stream) return;
        out.start_stream(200, {});
        out.write(writer->start(prompt_tokens));
    }

    void on_event(size_t c, engine::token_event& ev) override {
        completion_tokens_ = ev.completion_tokens;
        std::vector<text::output_event> events;
        if (!stopped_by_string_) {
            bool hit = false;
            parser->push(output_text->push(ev.tokens, &hit), &events);
            if (hit) {
                stopped_by_string_ = true;
                stop_choice(c);
            }
        }
        if (ev.finished) {
            if (!stopped_by_string_) parser->push(output_text->finish(), &events);
            parser->finish(&events);
            reason_ = stopped_by_string_ ? engine::finish_reason::stop : ev.reason;
            if (ev.reason == engine::finish_reason::error) error_ = ev.error;
            if (parser->malformed()) app->tool_call_parse_failures++;
        }
        std::string sse = writer->apply(events);
        if (stream && !sse.empty()) out.write(std::move(sse));
    }

    void on_all_finished() override {
        if (reason_ == engine::finish_reason::error || reason_ == engine::finish_reason::aborted) {
            const status st = reason_ == engine::finish_reason::error
                                  ? error_
                                  : make_error(error_code::unavailable, "the request was aborted");
            int http_status = 500;
            std::string body = anthropic_error_body(st, &http_status);
            if (!stream) return out.send({http_status, {}, std::move(body)});
            out.write(sse_event("error", body));
            return out.end_stream();
        }
        const bool length = reason_ == engine::finish_reason::length;
        const std::string stop = stopped_by_string_ ? output_text->matched_stop() : std::string();
        if (!stream) return out.send({200, {}, writer->message(length, stop, prompt_tokens, completion_tokens_)});
        out.write(writer->finish(length, stop, completion_tokens_));
        out.end_stream();
    }
};

void send_error(const http::responder& out, const status& st) {
    int http_status = 500;
    std::string body = anthropic_error_body(st, &http_status);
    http::header_list headers;
    if (http_status == 503) headers.emplace_back("Retry-After", "1");
    out.send({http_status, std::move(headers), std::move(body)});
}

// The request read and rendered: everything but submitting it.
struct prepared {
    messages_request request;
    chat_pipeline pipeline;
    std::shared_ptr<const text::tokenizer> tok;
};

result<prepared> prepare(app_state& app, const http::request& req, const engine::engine& eng) {
    simdjson::dom::parser parser;
    auto body = parse_json_object(parser, req);
    if (!body) return body.error();
    auto request = messages_request_from_json(req.body, body->get_object().value());
    if (!request) return request.error();
    TANDEM_RETURN_IF_ERROR(check_model_name(app, request->opts.model));
    auto tok = app.tokenizer();
    auto pipeline = prepare_chat(request->chat, request->opts, *tok, eng.eos_token_id());
    if (!pipeline) return pipeline.error();
    return prepared{std::move(*request), std::move(*pipeline), std::move(tok)};
}

}  // namespace

void handle_messages(app_state& app, const http::request& req, const http::responder& out) {
    auto e = serving_engine(app);
    if (!e) return send_error(out, e.error());
    auto p = prepare(app, req, **e);
    if (!p) return send_error(out, p.error());
    // Submitted at once, or on the grammar worker once the output grammar (tool_choice "tool")
    // is compiled.
    const std::string spec = p->pipeline.grammar_spec;
    http::request id_only;
    id_only.request_id = req.request_id;
    auto ready = [&app, out, id_only, p = std::move(*p)](
                     engine::engine& eng, std::shared_ptr<const grammar::compiled> grammar) mutable {
        p.request.opts.sampling.grammar_spec = p.pipeline.grammar_spec;
        p.request.opts.sampling.grammar = std::move(grammar);
        auto session = std::make_shared<messages_session>();
        session->bind(app, id_only, out, p.request.opts.stream, "msg_");
        session->output_text = p.pipeline.make_text(p.tok);
        session->parser = p.pipeline.make_parser();
        session->writer = std::make_unique<messages_writer>(session->id, session->model,
                                                            "toolu_" + id_only.request_id + "_", session->stream);
        session->prompt_tokens = static_cast<int64_t>(p.pipeline.prompt_ids.size());
        std::vector<engine::submit_request> subs;
        subs.push_back(make_submit(p.pipeline.prompt_ids, p.request.opts, 0, id_only.request_id, eng));
        if (status st = session->submit_all(eng, std::move(subs)); !st) return send_error(out, st);
        session->open();
    };
    when_grammar_ready(app, **e, spec, out, std::move(ready), [out](const status& st) { send_error(out, st); });
}

void handle_messages_count_tokens(app_state& app, const http::request& req, const http::responder& out) {
    auto e = serving_engine(app);
    if (!e) return send_error(out, e.error());
    auto p = prepare(app, req, **e);
    if (!p) return send_error(out, p.error());
    json_writer w;
    w.begin_object().key("input_tokens").value(static_cast<int64_t>(p->pipeline.prompt_ids.size())).end_object();
    out.send({200, {}, w.take()});
}

void handle_messages_render(app_state& app, const http::request& req, const http::responder& out) {
    auto tok = app.tokenizer();
    if (!tok) return send_error(out, make_error(error_code::unavailable, "the tokenizer is not loaded yet"));
    simdjson::dom::parser parser;
    auto body = parse_json_object(parser, req);
    if (!body) return send_error(out, body.error());
    auto request = messages_request_from_json(req.body, body->get_object().value());
    if (!request) return send_error(out, request.error());
    auto prompt = text::render_chat(request->chat);
    if (!prompt) return send_error(out, prompt.error());
    auto ids = text::tokenize_prompt(*prompt, *tok);
    if (!ids) return send_error(out, ids.error());
    json_writer w;
    w.begin_object().key("prompt").value(prompt->text).key("tokens").begin_array();
    for (int32_t t : *ids) w.value(static_cast<int64_t>(t));
    w.end_array().end_object();
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
