// api/grammar_jobs.h — Compiles output grammars off the HTTP loop.
//
// Compiling a schema the compiler has not seen costs 0.1–2 s against DeepSeek-V4's 129k-id
// vocabulary (xgrammar precomputes token masks per grammar state), and HTTP handlers must not
// block the loop. A handler posts the compilation, and the submission that follows it, here:
// one worker thread, jobs in arrival order. stop() runs before the engine goes away (serve.cpp),
// so a job never sees a dead engine; jobs still queued then are told to give up (their client
// gets a 503).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "engine/engine.h"
#include "http/server.h"

namespace tandem::grammar {
class compiled;
}

namespace tandem::api {

class app_state;

class grammar_jobs {
public:
    // `run` is true on the worker; false when the job is dropped at stop().
    using job = std::function<void(bool run)>;

    grammar_jobs() = default;
    ~grammar_jobs() { stop(); }
    grammar_jobs(const grammar_jobs&) = delete;
    grammar_jobs& operator=(const grammar_jobs&) = delete;

    // After stop(), the job is dropped at once (job(false) on the caller's thread).
    void post(job j);
    // Finishes the running job, drops the queued ones, joins. Idempotent.
    void stop();

private:
    void loop();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<job> queue_;
    bool stopping_ = false;
    std::thread worker_;  // started by the first post()
};

// The step between a parsed chat request and its submission. Without a grammar, ready() runs at
// once with a null grammar. Otherwise, on the grammar worker: the spec is compiled for the
// serving engine's model (a spec the grammar engine refuses → failed(400)), and ready() runs
// there with it; a client that left meanwhile gets nothing, a server going away a 503.
using grammar_ready = std::function<void(engine::engine&, std::shared_ptr<const grammar::compiled>)>;
using grammar_failed = std::function<void(const status&)>;
void when_grammar_ready(app_state& app, engine::engine& eng, const std::string& spec,
                        const http::responder& out, grammar_ready ready, grammar_failed failed);

}  // namespace tandem::api
