#include "api/native_routes.h"

#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "api/event_json.h"
#include "api/generation_options.h"
#include "api/json_body.h"
#include "api/request_bodies.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "core/liveness.h"
#include "core/log.h"
#include "http/router.h"

namespace tandem::api {
namespace {

using simdjson::dom::element;

// One /generate request: engine events (scheduler thread) → the HTTP response. Events that
// arrive before the handler has opened the response are held until it has.
struct generate_session {
    app_state* app = nullptr;
    http::responder out;
    bool stream = false;
    std::string http_id;
    std::mutex mu;
    bool opened = false;
    std::vector<engine::token_event> early;
    std::vector<int32_t> ids;
    std::vector<engine::position_logprobs> logprobs;
    bool want_logprobs = false;

    void on_event(engine::token_event&& ev) {
        std::lock_guard lock(mu);
        if (!opened) {
            early.push_back(std::move(ev));
            return;
        }
        deliver(std::move(ev));
    }

    void open() {
        std::lock_guard lock(mu);
        opened = true;
        if (stream) out.start_stream(200, {});
        for (auto& ev : early) deliver(std::move(ev));
        early.clear();
    }

    void deliver(engine::token_event&& ev) {
        if (ev.finished) app->untrack(http_id, ev.id);
        if (stream) {
            deliver_chunk(ev);
        } else {
            ids.insert(ids.end(), ev.tokens.begin(), ev.tokens.end());
            logprobs.insert(logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
            if (ev.finished) deliver_whole(ev);
        }
    }

    void deliver_chunk(const engine::token_event& ev) {
        if (ev.finished && ev.reason == engine::finish_reason::error) {
            out.write(sse_data(http::error_body(ev.error.message(), "internal_error")));
        } else {
            json_writer w;
            w.begin_object().key("id").value(http_id).key("output_ids").begin_array();
            for (int32_t t : ev.tokens) w.value(static_cast<int64_t>(t));
            w.end_array();
            if (want_logprobs) {
                w.key("logprobs");
                write_token_logprobs(w, ev.logprobs);
            }
            w.key("finish_reason");
            if (ev.finished) w.value(engine::finish_reason_name(ev.reason)); else w.null();
            if (ev.finished) {
                w.key("usage");
                write_usage(w, ev.prompt_tokens, ev.completion_tokens);
            }
            out.write(sse_data(w.end_object().str()));
        }
        if (ev.finished) {
            out.write(std::string(k_sse_done));
            out.end_stream();
        }
    }

    void deliver_whole(const engine::token_event& ev) {
        if (ev.reason == engine::finish_reason::error) {
            send_status_error(out, ev.error);
            return;
        }
        json_writer w;
        w.begin_object().key("id").value(http_id).key("output_ids").begin_array();
        for (int32_t t : ids) w.value(static_cast<int64_t>(t));
        w.end_array();
        if (want_logprobs) {
            w.key("logprobs");
            write_token_logprobs(w, logprobs);
        }
        w.key("finish_reason").value(engine::finish_reason_name(ev.reason));
        w.key("usage");
        write_usage(w, ev.prompt_tokens, ev.completion_tokens);
        out.send({200, {}, w.end_object().take()});
    }
};

}  // namespace

result<engine::engine*> serving_engine(const app_state& app) {
    engine::engine* e = app.engine();
    topo::deployment* d = app.deployment();
    if (!e && d != nullptr && app.state() == serving_state::serving) {
        return make_error(error_code::unavailable, d->no_engine_reason());
    }
    if (!e || app.state() != serving_state::serving) {
        return make_error(error_code::unavailable, "the model is not ready: " + app.state_detail());
    }
    return e;
}

engine::engine* engine_or_503(app_state& app, const http::responder& out) {
    auto e = serving_engine(app);
    if (!e) {
        send_status_error(out, e.error());
        return nullptr;
    }
    return *e;
}

void handle_generate(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    simdjson::dom::parser parser;
    auto obj_or = json_object_or_400(parser, req, out);
    if (!obj_or) return;
    simdjson::dom::object obj = *obj_or;
    auto body = read_generate_body(obj, e->vocab_size());
    if (!body) return send_status_error(out, body.error());
    generate_body& g = *body;
    auto session = std::make_shared<generate_session>();
    session->app = &app;
    session->out = out;
    session->http_id = req.request_id;
    session->stream = g.stream;
    session->want_logprobs = g.opts.sampling.logprobs >= 0;

    engine::submit_request sub;
    sub.prompt = std::move(g.input_ids);
    sub.params = g.opts.sampling;
    sub.trace_id = req.request_id;
    sub.sink = [session](engine::token_event&& ev) { session->on_event(std::move(ev)); };
    auto id = e->submit(std::move(sub));
    if (!id) return send_status_error(out, id.error());
    if (app.track(req.request_id, *id)) e->abort(*id);  // its abort came first
    out.on_cancel([e, rid = *id] { e->abort(rid); });
    session->open();
}

void handle_abort_request(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    simdjson::dom::parser parser;
    auto obj_or = json_object_or_400(parser, req, out);
    if (!obj_or) return;
    simdjson::dom::object obj = *obj_or;
    app_state::abort_plan plan;
    element el;
    if (!obj["abort_all"].get(el) && el.is_bool() && el.get_bool().value()) {
        plan.running = app.tracked_all();
    } else if (!obj["rid"].get(el) && el.is_string()) {
        plan = app.plan_abort(std::string(el.get_string().value()));
    } else {
        return send_status_error(out, make_error(error_code::invalid_argument,
                                                 "expected {\"rid\": \"<request id>\"} or {\"abort_all\": true}"));
    }
    for (engine::request_id id : plan.running) e->abort(id);
    // "aborted": running requests aborted now; "pending": none was running, so the abort waits
    // (a few seconds) for a request arriving with that id.
    json_writer w;
    w.begin_object()
        .key("aborted").value(static_cast<int64_t>(plan.running.size()))
        .key("pending").value(plan.pending)
        .end_object();
    out.send({200, {}, w.take()});
}

// Answered from the engine's thread once the flush ran at a step boundary: 409 while requests
// hold cache state (SGLang's /flush_cache refuses when not idle, too), 400 when the cache is off.
void handle_flush_cache(app_state& app, const http::request& req, const http::responder& out) {
    (void)req;
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    e->flush_prefix_cache([out](result<int64_t> freed) {
        if (!freed) {
            if (freed.error().code() == error_code::unavailable) {
                http::send_error(out, 409, freed.error().message());
            } else {
                send_status_error(out, freed.error());
            }
            return;
        }
        json_writer w;
        w.begin_object().key("flushed").value(true).key("pages_freed").value(*freed).end_object();
        out.send({200, {}, w.take()});
    });
}

void handle_health_generate(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    struct probe {
        std::mutex mu;
        bool answered = false;
        int64_t started_ms = monotonic_ms();
    };
    auto p = std::make_shared<probe>();
    auto answer = [p, out](int status, std::string body) {
        std::lock_guard lock(p->mu);
        if (p->answered) return;
        p->answered = true;
        out.send({status, {}, std::move(body)});
    };
    engine::submit_request sub;
    sub.prompt = {0};
    sub.params.temperature = 0.0;
    sub.params.max_tokens = 1;
    sub.params.ignore_eos = true;
    sub.trace_id = req.request_id;
    sub.sink = [p, answer](engine::token_event&& ev) {
        if (!ev.finished) return;
        if (ev.reason == engine::finish_reason::error || ev.completion_tokens != 1) {
            answer(503, http::error_body("health generation failed: " + ev.error.message(), "unavailable_error"));
            return;
        }
        json_writer w;
        w.begin_object().key("status").value("ok")
            .key("token").value(static_cast<int64_t>(ev.tokens.empty() ? -1 : ev.tokens.back()))
            .key("latency_ms").value(monotonic_ms() - p->started_ms).end_object();
        answer(200, w.take());
    };
    auto id = e->submit(std::move(sub));
    if (!id) {
        answer(503, http::error_body("health generation was not admitted: " + id.error().message(), "unavailable_error"));
        return;
    }
    // The deadline: a stalled engine must turn this into a 503, not a hang.
    int64_t deadline_ms = app.cfg().scheduler.stall_timeout_ms;
    std::thread([e, rid = *id, answer, deadline_ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(deadline_ms));
        answer(503, http::error_body(fmt::format("no token within {} ms", deadline_ms), "unavailable_error"));
        e->abort(rid);
    }).detach();
}

}  // namespace tandem::api
