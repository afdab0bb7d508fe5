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
#include <thread>

namespace tandem::api {

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

}  // namespace tandem::api
