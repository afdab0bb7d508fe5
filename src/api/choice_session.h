// api/choice_session.h — One HTTP generation request fanned out into engine requests (n choices,
// or several prompts), and the engine's events fanned back into one HTTP response.
//
// Threads: handlers create and open() the session on the HTTP loop; engine events arrive on the
// scheduler thread. Events that arrive before open() are held, so the response head always goes
// out first. Every choice ends exactly once; when the last one ends, finish_response() runs.
// A client disconnect aborts every choice still running.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/app_state.h"
#include "api/stop_matcher.h"
#include "core/json_writer.h"
#include "engine/engine.h"
#include "text/detokenizer.h"

namespace tandem::api {

// Token ids → text, stop strings applied: what one choice may show so far.
class choice_text {
public:
    // `hidden_ids` (EOS, stop token ids) end generation but are not text.
    choice_text(std::shared_ptr<const text::tokenizer> tok, text::special_token_policy policy,
                std::vector<std::string> stops, std::vector<int32_t> hidden_ids = {});
    // Text newly safe to show; `*stop_hit` turns true when a stop string ended the choice.
    std::string push(const std::vector<int32_t>& tokens, bool* stop_hit);
    // End of generation: flushes what was held back (unless a stop string was hit).
    std::string finish();
    bool stopped() const { return stops_.stopped(); }
    const std::string& matched_stop() const { return stops_.matched(); }

private:
    text::stream_detokenizer detok_;
    stop_matcher stops_;
    std::vector<int32_t> hidden_;
};

class choice_session : public std::enable_shared_from_this<choice_session> {
public:
    virtual ~choice_session() = default;

    // Ties the session to its HTTP request: responder, ids ("<prefix><request id>"), model name.
    void bind(app_state& app_ref, const http::request& req, const http::responder& responder,
              bool streaming, std::string_view id_prefix);

    // Submits one engine request per entry; on the first error nothing stays running and the
    // error is returned (the handler answers it).
    status submit_all(engine::engine& eng, std::vector<engine::submit_request> requests);
    // Opens the response (stream head or nothing) and replays held events.
    void open();

    app_state* app = nullptr;
    engine::engine* eng = nullptr;
    http::responder out;
    std::string http_id;
    bool stream = false;
    std::string id;     // "chatcmpl-…" / "cmpl-…"
    std::string model;  // the served name
    int64_t created = 0;

protected:
    // Called under the session lock, in event order, per choice.
    virtual void on_stream_start() {}
    virtual void on_event(size_t choice, engine::token_event& ev) = 0;
    virtual void on_all_finished() = 0;
    // Asks the engine to end `choice` as stopped (a stop string matched).
    void stop_choice(size_t choice);
    // Opens the object every OpenAI body starts with: {"id","object","created","model",
    void begin_envelope(json_writer& w, std::string_view object) const;
    // Ends a stream: the usage chunk when asked for, then [DONE].
    void end_sse(std::string_view chunk_object, bool include_usage, int64_t prompt_tokens,
                 int64_t completion_tokens);

    size_t choices() const { return ids_.size(); }

private:
    void handle(size_t choice, engine::token_event&& ev);

    std::mutex mu_;
    bool opened_ = false;
    std::vector<std::pair<size_t, engine::token_event>> early_;
    std::vector<engine::request_id> ids_;
    size_t finished_ = 0;
};

// OpenAI's finish_reason for an engine reason ("stop", "length"; aborts read "abort").
const char* openai_finish_reason(engine::finish_reason r);

}  // namespace tandem::api
