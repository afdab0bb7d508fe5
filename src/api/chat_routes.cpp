#include "api/chat_routes.h"

#include <fmt/format.h>

#include <ctime>

#include "api/chat_pipeline.h"
#include "api/choice_session.h"
#include "api/event_json.h"
#include "api/generation_options.h"
#include "api/grammar_jobs.h"
#include "api/json_body.h"
#include "api/native_routes.h"
#include "api/openai_common.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "http/router.h"
#include "text/chat.h"
#include "text/output_parser.h"

namespace tandem::api {
namespace {

struct tool_call_out {
    std::string id, name, arguments;
};

void write_tool_call(json_writer& w, int64_t index, const tool_call_out& call, bool with_index) {
    w.begin_object();
    if (with_index) w.key("index").value(index);
    w.key("id").value(call.id).key("type").value("function").key("function").begin_object()
        .key("name").value(call.name).key("arguments").value(call.arguments).end_object();
    w.end_object();
}

// Chat logprobs: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}.
void write_chat_logprob_entries(json_writer& w, const text::tokenizer& tok,
                                const std::vector<engine::position_logprobs>& lps) {
    auto entry = [&](const engine::token_logprob& t) {
        std::string piece(tok.token_bytes(t.token));
        w.key("token").value(token_text(tok, t.token)).key("logprob").value(static_cast<double>(t.logprob));
        w.key("bytes").begin_array();
        for (unsigned char b : piece) w.value(static_cast<int64_t>(b));
        w.end_array();
    };
    w.begin_array();
    for (const auto& p : lps) {
        w.begin_object();
        entry(p.chosen);
        w.key("top_logprobs").begin_array();
        for (const auto& t : p.top) {
            w.begin_object();
            entry(t);
            w.end_object();
        }
        w.end_array().end_object();
    }
    w.end_array();
}

class chat_session final : public choice_session {
public:
    struct choice_state {
        std::unique_ptr<choice_text> text;
        std::unique_ptr<text::output_parser> parser;
        std::string content, reasoning;
        std::vector<tool_call_out> calls;
        std::vector<engine::position_logprobs> logprobs;
        // Streaming: logprobs of tokens whose text has not been sent yet. They ride in the
        // chunk that carries that text (the detokenizer and parser may hold text back).
        std::vector<engine::position_logprobs> pending_logprobs;
        engine::finish_reason reason = engine::finish_reason::none;
        bool stopped_by_string = false;
        int64_t prompt_tokens = 0, completion_tokens = 0;
        status error;
    };

    generation_options opts;
    std::shared_ptr<const text::tokenizer> tok;
    std::vector<choice_state> state;

private:
    void write_delta(size_t c, const std::function<void(json_writer&)>& delta,
                     const std::vector<engine::position_logprobs>* lps, const char* finish,
                     bool parse_error = false) {
        json_writer w;
        begin_envelope(w, "chat.completion.chunk");
        w.key("choices").begin_array();
        w.begin_object().key("index").value(static_cast<int64_t>(c)).key("delta").begin_object();
        delta(w);
        w.end_object().key("logprobs");
        if (lps && !lps->empty()) {
            w.begin_object().key("content");
            write_chat_logprob_entries(w, *tok, *lps);
            w.end_object();
        } else {
            w.null();
        }
        w.key("finish_reason");
        if (finish) w.value(finish); else w.null();
        if (parse_error) w.key("tool_call_parse_error").value(true);
        w.end_object().end_array().end_object();
        out.write(sse_data(w.str()));
    }

    void on_stream_start() override {
        if (!stream) return;
        out.start_stream(200, {});
        for (size_t c = 0; c < state.size(); ++c) {
            write_delta(c, [](json_writer& w) { w.key("role").value("assistant").key("content").value(""); },
                        nullptr, nullptr);
        }
    }

    // A streamed delta, with the logprobs of the tokens that produced it.
    void write_text_delta(size_t c, const std::function<void(json_writer&)>& delta) {
        choice_state& s = state[c];
        write_delta(c, delta, &s.pending_logprobs, nullptr);
        s.pending_logprobs.clear();
    }

    void apply(size_t c, std::vector<text::output_event>& events) {
        choice_state& s = state[c];
        for (auto& ev : events) {
            switch (ev.type) {
                case text::output_event::kind::reasoning:
                    s.reasoning += ev.text;
                    if (stream) write_text_delta(c, [&](json_writer& w) { w.key("reasoning_content").value(ev.text); });
                    break;
                case text::output_event::kind::content:
                    s.content += ev.text;
                    if (stream) write_text_delta(c, [&](json_writer& w) { w.key("content").value(ev.text); });
                    break;
                case text::output_event::kind::tool_call: {
                    tool_call_out call{fmt::format("call_{}_{}_{}", http_id, c, ev.tool_index),
                                       ev.tool_name, ev.arguments};
                    if (stream) {
                        write_text_delta(c, [&](json_writer& w) {
                            w.key("tool_calls").begin_array();
                            write_tool_call(w, ev.tool_index, call, true);
                            w.end_array();
                        });
                    }
                    s.calls.push_back(std::move(call));
                    break;
                }
            }
        }
        events.clear();
    }

    void on_event(size_t c, engine::token_event& ev) override {
        choice_state& s = state[c];
        s.prompt_tokens = ev.prompt_tokens;
        s.completion_tokens = ev.completion_tokens;
        std::vector<text::output_event> events;
        if (!s.stopped_by_string) {
            bool hit = false;
            std::string fresh = s.text->push(ev.tokens, &hit);
            s.parser->push(fresh, &events);
            if (hit) {
                s.stopped_by_string = true;
                stop_choice(c);
            }
        }
        if (opts.sampling.logprobs >= 0) {
            auto& into = stream ? s.pending_logprobs : s.logprobs;
            into.insert(into.end(), ev.logprobs.begin(), ev.logprobs.end());
        }
        if (ev.finished) {
            if (!s.stopped_by_string) s.parser->push(s.text->finish(), &events);
            s.parser->finish(&events);
            s.reason = s.stopped_by_string ? engine::finish_reason::stop : ev.reason;
            if (ev.reason == engine::finish_reason::error) s.error = ev.error;
            if (s.parser->malformed()) app->tool_call_parse_failures++;
        }
        apply(c, events);
        if (ev.finished && stream) {
            if (s.reason == engine::finish_reason::error) {
                out.write(sse_data(http::error_body(s.error.message(), "internal_error")));
            }
            // Tokens that produced no text (EOS, a hidden stop token) end with the last chunk.
            write_delta(c, [](json_writer&) {}, &s.pending_logprobs, finish_reason_of(s),
                        s.parser->malformed());
            s.pending_logprobs.clear();
        }
    }

    const char* finish_reason_of(const choice_state& s) const {
        if (!s.calls.empty() && s.reason == engine::finish_reason::stop) return "tool_calls";
        return openai_finish_reason(s.reason);
    }

    void on_all_finished() override {
        int64_t prompt = state.empty() ? 0 : state[0].prompt_tokens, completion = 0;
        for (const auto& s : state) completion += s.completion_tokens;
        if (stream) return end_sse("chat.completion.chunk", opts.include_usage, prompt, completion);
        for (const auto& s : state) {
            if (s.reason == engine::finish_reason::error) return send_status_error(out, s.error);
        }
        json_writer w;
        begin_envelope(w, "chat.completion");
        w.key("choices").begin_array();
        for (size_t c = 0; c < state.size(); ++c) {
            const auto& s = state[c];
            w.begin_object().key("index").value(static_cast<int64_t>(c)).key("message").begin_object()
                .key("role").value("assistant").key("content");
            if (s.content.empty() && !s.calls.empty()) w.null(); else w.value(s.content);
            if (!s.reasoning.empty()) w.key("reasoning_content").value(s.reasoning);
            if (!s.calls.empty()) {
                w.key("tool_calls").begin_array();
                for (size_t i = 0; i < s.calls.size(); ++i) write_tool_call(w, static_cast<int64_t>(i), s.calls[i], false);
                w.end_array();
            }
            w.end_object().key("logprobs");
            if (opts.sampling.logprobs >= 0) {
                w.begin_object().key("content");
                write_chat_logprob_entries(w, *tok, s.logprobs);
                w.end_object();
            } else {
                w.null();
            }
            w.key("finish_reason").value(finish_reason_of(s));
            if (s.parser->malformed()) w.key("tool_call_parse_error").value(true);
            w.end_object();
        }
        w.end_array().key("usage");
        write_usage(w, prompt, completion);
        out.send({200, {}, w.end_object().take()});
    }
};

}  // namespace

void handle_chat_completions(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    simdjson::dom::parser parser;
    auto body = json_object_or_400(parser, req, out);
    if (!body) return;
    auto opts = parse_generation_options((*body), api_kind::chat, 0);
    if (!opts) return send_status_error(out, opts.error());
    if (status st = check_model_name(app, opts->model); !st) return send_status_error(out, st);
    auto chat = text::chat_request_from_openai_json(req.body);
    if (!chat) return send_status_error(out, chat.error());
    auto tok = app.tokenizer();
    auto pipeline = prepare_chat(*chat, *opts, *tok, e->eos_token_id());
    if (!pipeline) return send_status_error(out, pipeline.error());

    // Submitted at once, or on the grammar worker once the output grammar is compiled.
    const std::string spec = pipeline->grammar_spec;
    http::request id_only;
    id_only.request_id = req.request_id;
    auto ready = [&app, out, id_only, opts = std::move(*opts), pipeline = std::move(*pipeline), tok](
                     engine::engine& eng, std::shared_ptr<const grammar::compiled> grammar) mutable {
        opts.sampling.grammar_spec = pipeline.grammar_spec;
        opts.sampling.grammar = std::move(grammar);
        auto session = std::make_shared<chat_session>();
        session->bind(app, id_only, out, opts.stream, "chatcmpl-");
        session->opts = opts;
        session->tok = tok;
        std::vector<engine::submit_request> subs;
        for (int64_t i = 0; i < opts.n; ++i) {
            chat_session::choice_state s;
            s.text = pipeline.make_text(tok);
            s.parser = pipeline.make_parser();
            session->state.push_back(std::move(s));
            subs.push_back(make_submit(pipeline.prompt_ids, opts, i, id_only.request_id, eng));
        }
        if (status st = session->submit_all(eng, std::move(subs)); !st) return send_status_error(out, st);
        session->open();
    };
    when_grammar_ready(app, *e, spec, out, std::move(ready),
                       [out](const status& st) { send_status_error(out, st); });
}

}  // namespace tandem::api
