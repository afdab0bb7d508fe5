#include "api/completions_routes.h"

#include <fmt/format.h>

#include <ctime>

#include "api/choice_session.h"
#include "api/event_json.h"
#include "api/generation_options.h"
#include "api/json_body.h"
#include "api/native_routes.h"
#include "api/openai_common.h"
#include "api/request_bodies.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "http/router.h"

namespace tandem::api {
namespace {

using simdjson::dom::element;

// The legacy logprobs object, accumulated across a choice.
struct legacy_logprobs {
    std::vector<std::string> tokens;
    std::vector<std::optional<float>> token_logprobs;
    std::vector<std::vector<std::pair<std::string, float>>> top;
    std::vector<int64_t> text_offset;
};

void append_logprobs(legacy_logprobs& lp, const text::tokenizer& tok,
                     const std::vector<engine::position_logprobs>& positions, int64_t* offset,
                     bool first_is_null) {
    for (size_t i = 0; i < positions.size(); ++i) {
        const auto& p = positions[i];
        std::string piece = token_text(tok, p.chosen.token);
        lp.tokens.push_back(piece);
        if (first_is_null && i == 0) {
            lp.token_logprobs.push_back(std::nullopt);  // nothing predicts the first prompt token
            lp.top.emplace_back();
        } else {
            lp.token_logprobs.push_back(p.chosen.logprob);
            std::vector<std::pair<std::string, float>> alts;
            for (const auto& t : p.top) alts.emplace_back(token_text(tok, t.token), t.logprob);
            lp.top.push_back(std::move(alts));
        }
        lp.text_offset.push_back(*offset);
        *offset += static_cast<int64_t>(piece.size());
    }
}

void write_legacy_logprobs(json_writer& w, const legacy_logprobs& lp) {
    w.begin_object().key("tokens").begin_array();
    for (const auto& t : lp.tokens) w.value(t);
    w.end_array().key("token_logprobs").begin_array();
    for (const auto& v : lp.token_logprobs) {
        if (v) w.value(static_cast<double>(*v)); else w.null();
    }
    w.end_array().key("top_logprobs").begin_array();
    for (const auto& alts : lp.top) {
        if (alts.empty()) { w.null(); continue; }
        w.begin_object();
        for (const auto& [t, v] : alts) w.key(t).value(static_cast<double>(v));
        w.end_object();
    }
    w.end_array().key("text_offset").begin_array();
    for (int64_t o : lp.text_offset) w.value(o);
    w.end_array().end_object();
}

class completion_session final : public choice_session {
public:
    struct choice_state {
        std::unique_ptr<choice_text> text;
        std::string prompt_text;    // echo
        std::string full;           // whole response text (non-stream)
        legacy_logprobs logprobs;
        int64_t offset = 0;
        engine::finish_reason reason = engine::finish_reason::none;
        bool stopped_by_string = false;
        int64_t prompt_tokens = 0, completion_tokens = 0;
        status error;
    };

    generation_options opts;
    std::shared_ptr<const text::tokenizer> tok;
    std::vector<choice_state> state;

private:
    void on_stream_start() override {
        if (stream) out.start_stream(200, {});
    }

    void on_event(size_t c, engine::token_event& ev) override {
        choice_state& s = state[c];
        std::string delta;
        bool first = s.prompt_tokens == 0;
        s.prompt_tokens = ev.prompt_tokens;
        // echo_only: the engine generates one token (it always does) that nobody asked for;
        // it is dropped with its logprobs and not counted.
        s.completion_tokens = opts.echo_only ? 0 : ev.completion_tokens;
        if (first && opts.echo) delta += s.prompt_text;
        bool want_lp = opts.sampling.logprobs >= 0;
        legacy_logprobs chunk_lp;
        if (want_lp) {
            legacy_logprobs& target = stream ? chunk_lp : s.logprobs;
            if (first && opts.echo) append_logprobs(target, *tok, ev.prompt_logprobs, &s.offset, true);
            if (!opts.echo_only) append_logprobs(target, *tok, ev.logprobs, &s.offset, false);
        }
        if (opts.echo_only) {
            if (ev.finished) {
                s.reason = ev.reason == engine::finish_reason::error ? ev.reason : engine::finish_reason::length;
                s.error = ev.error;
            }
        } else if (!s.stopped_by_string) {
            bool hit = false;
            delta += s.text->push(ev.tokens, &hit);
            if (hit) {
                s.stopped_by_string = true;
                stop_choice(c);
            }
        }
        if (ev.finished && !opts.echo_only) {
            if (!s.stopped_by_string) delta += s.text->finish();
            s.reason = s.stopped_by_string ? engine::finish_reason::stop : ev.reason;
            if (ev.reason == engine::finish_reason::error) s.error = ev.error;
        }
        if (stream) {
            write_chunk(c, delta, want_lp ? &chunk_lp : nullptr, ev.finished ? &s : nullptr);
        } else {
            s.full += delta;
        }
    }

    void write_chunk(size_t c, const std::string& delta, const legacy_logprobs* lp,
                     const choice_state* finished) {
        if (delta.empty() && !finished && (!lp || lp->tokens.empty())) return;
        json_writer w;
        begin_envelope(w, "text_completion");
        w.key("choices").begin_array();
        w.begin_object().key("index").value(static_cast<int64_t>(c)).key("text").value(delta);
        w.key("logprobs");
        if (lp) write_legacy_logprobs(w, *lp); else w.null();
        w.key("finish_reason");
        if (finished) w.value(openai_finish_reason(finished->reason)); else w.null();
        w.end_object().end_array().end_object();
        out.write(sse_data(w.str()));
        if (finished && finished->reason == engine::finish_reason::error) {
            out.write(sse_data(http::error_body(finished->error.message(), "internal_error")));
        }
    }

    void on_all_finished() override {
        int64_t prompt = 0, completion = 0;
        for (size_t c = 0; c < state.size(); ++c) {
            // Choices of one prompt share its tokens; count each prompt once (n copies).
            if (c % static_cast<size_t>(opts.n) == 0) prompt += state[c].prompt_tokens;
            completion += state[c].completion_tokens;
        }
        if (stream) return end_sse("text_completion", opts.include_usage, prompt, completion);
        for (const auto& s : state) {
            if (s.reason == engine::finish_reason::error) return send_status_error(out, s.error);
        }
        json_writer w;
        begin_envelope(w, "text_completion");
        w.key("choices").begin_array();
        for (size_t c = 0; c < state.size(); ++c) {
            const auto& s = state[c];
            w.begin_object().key("index").value(static_cast<int64_t>(c)).key("text").value(s.full);
            w.key("logprobs");
            if (opts.sampling.logprobs >= 0) write_legacy_logprobs(w, s.logprobs); else w.null();
            w.key("finish_reason").value(openai_finish_reason(s.reason)).end_object();
        }
        w.end_array().key("usage");
        write_usage(w, prompt, completion);
        out.send({200, {}, w.end_object().take()});
    }
};

}  // namespace

void handle_completions(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    simdjson::dom::parser parser;
    auto obj_or = json_object_or_400(parser, req, out);
    if (!obj_or) return;
    simdjson::dom::object obj = *obj_or;
    auto opts = parse_generation_options(obj, api_kind::completion, 16);
    if (!opts) return send_status_error(out, opts.error());
    opts->max_tokens_given = true;  // the legacy API's default is 16 tokens, not the context
    if (status st = check_model_name(app, opts->model); !st) return send_status_error(out, st);
    auto tok = app.tokenizer();
    auto prompts = read_prompts(obj, *tok, e->vocab_size());
    if (!prompts) return send_status_error(out, prompts.error());

    auto session = std::make_shared<completion_session>();
    session->bind(app, req, out, opts->stream, "cmpl-");
    session->opts = *opts;
    session->tok = tok;
    std::vector<engine::submit_request> subs;
    for (const auto& prompt : *prompts) {
        for (int64_t i = 0; i < opts->n; ++i) {
            completion_session::choice_state s;
            s.text = std::make_unique<choice_text>(
                tok, opts->skip_special_tokens ? text::special_token_policy::skip_special
                                               : text::special_token_policy::keep_all,
                opts->stop, opts->sampling.stop_token_ids);
            if (opts->echo) s.prompt_text = tok->decode(prompt).value();
            session->state.push_back(std::move(s));
            subs.push_back(make_submit(prompt, *opts, i, req.request_id, *e));
            if (opts->echo_only) subs.back().params.max_tokens = 1;
        }
    }
    if (status st = session->submit_all(*e, std::move(subs)); !st) return send_status_error(out, st);
    session->open();
}

}  // namespace tandem::api
