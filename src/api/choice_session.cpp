#include "api/choice_session.h"

#include "api/event_json.h"

#include <algorithm>
#include <ctime>

namespace tandem::api {

choice_text::choice_text(std::shared_ptr<const text::tokenizer> tok,
                         text::special_token_policy policy, std::vector<std::string> stops,
                         std::vector<int32_t> hidden_ids)
    : detok_(std::move(tok), policy), stops_(std::move(stops)), hidden_(std::move(hidden_ids)) {}

std::string choice_text::push(const std::vector<int32_t>& tokens, bool* stop_hit) {
    std::string fresh;
    for (int32_t t : tokens) {
        if (std::find(hidden_.begin(), hidden_.end(), t) != hidden_.end()) continue;
        // Ids come from the model's own vocabulary; an unknown id yields no text.
        (void)detok_.push(t, &fresh);
    }
    stop_matcher::step s = stops_.push(fresh);
    if (s.stopped) *stop_hit = true;
    return std::move(s.emit);
}

std::string choice_text::finish() {
    std::string tail;
    detok_.finish(&tail);
    std::string out = stops_.push(tail).emit;
    return out + stops_.flush();
}

void choice_session::bind(app_state& app_ref, const http::request& req,
                          const http::responder& responder, bool streaming,
                          std::string_view id_prefix) {
    app = &app_ref;
    out = responder;
    http_id = req.request_id;
    stream = streaming;
    id = std::string(id_prefix) + req.request_id;
    model = app_ref.cfg().model.served_name;
    created = static_cast<int64_t>(std::time(nullptr));
}

status choice_session::submit_all(engine::engine& eng_ref, std::vector<engine::submit_request> requests) {
    eng = &eng_ref;
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < requests.size(); ++i) {
        // The engine keeps the session alive until each choice's final event; the HTTP side
        // holds it only weakly (on_cancel), so nothing cycles once the engine lets go.
        std::shared_ptr<choice_session> self = shared_from_this();
        requests[i].sink = [self, i](engine::token_event&& ev) { self->handle(i, std::move(ev)); };
        auto id = eng->submit(std::move(requests[i]));
        if (!id) {
            for (engine::request_id started : ids_) eng->abort(started);
            finished_ = ids_.size();  // their final events are dropped: the handler answers
            opened_ = true;
            ids_.clear();
            return id.error();
        }
        ids_.push_back(*id);
        if (app->track(http_id, *id)) eng->abort(*id);  // its abort came first
    }
    std::weak_ptr<choice_session> weak = weak_from_this();
    out.on_cancel([weak] {
        if (auto self = weak.lock()) {
            for (engine::request_id id : self->ids_) self->eng->abort(id);
        }
    });
    return status::ok();
}

void choice_session::open() {
    std::lock_guard lock(mu_);
    opened_ = true;
    on_stream_start();
    auto held = std::move(early_);
    early_.clear();
    for (auto& [choice, ev] : held) {
        if (ev.finished) {
            ++finished_;
            app->untrack(http_id, ev.id);
        }
        on_event(choice, ev);
        if (finished_ == ids_.size()) on_all_finished();
    }
}

void choice_session::handle(size_t choice, engine::token_event&& ev) {
    std::lock_guard lock(mu_);
    if (ids_.empty() && opened_) return;  // a failed submit_all: the handler answered already
    if (!opened_) {
        early_.emplace_back(choice, std::move(ev));
        return;
    }
    if (ev.finished) {
        ++finished_;
        app->untrack(http_id, ev.id);
    }
    on_event(choice, ev);
    if (finished_ == ids_.size()) on_all_finished();
}

void choice_session::begin_envelope(json_writer& w, std::string_view object) const {
    w.begin_object().key("id").value(id).key("object").value(object).key("created").value(created)
        .key("model").value(model);
}

void choice_session::end_sse(std::string_view chunk_object, bool include_usage,
                             int64_t prompt_tokens, int64_t completion_tokens) {
    if (include_usage) {
        json_writer w;
        begin_envelope(w, chunk_object);
        w.key("choices").begin_array().end_array().key("usage");
        write_usage(w, prompt_tokens, completion_tokens);
        out.write(sse_data(w.end_object().str()));
    }
    out.write(std::string(k_sse_done));
    out.end_stream();
}

void choice_session::stop_choice(size_t choice) {
    if (choice < ids_.size()) eng->finish(ids_[choice]);
}

const char* openai_finish_reason(engine::finish_reason r) {
    switch (r) {
        case engine::finish_reason::length: return "length";
        case engine::finish_reason::aborted: return "abort";
        case engine::finish_reason::error: return "error";
        default: return "stop";
    }
}

}  // namespace tandem::api
