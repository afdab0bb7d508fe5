#include "api/grammar_jobs.h"

#include "api/app_state.h"
#include "grammar/grammar.h"

namespace tandem::api {

void grammar_jobs::post(job j) {
    {
        std::lock_guard lock(mu_);
        if (!stopping_) {
            if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
            queue_.push_back(std::move(j));
            cv_.notify_one();
            return;
        }
    }
    j(false);
}

void grammar_jobs::stop() {
    std::deque<job> dropped;
    std::thread worker;
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
        dropped.swap(queue_);
        worker = std::move(worker_);
        cv_.notify_all();
    }
    if (worker.joinable()) worker.join();
    for (job& j : dropped) j(false);
}

void grammar_jobs::loop() {
    for (;;) {
        job j;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) return;
            j = std::move(queue_.front());
            queue_.pop_front();
        }
        j(true);
    }
}

void when_grammar_ready(app_state& app, engine::engine& eng, const std::string& spec,
                        const http::responder& out, grammar_ready ready, grammar_failed failed) {
    if (spec.empty()) return ready(eng, nullptr);
    app.grammar_work().post([&app, spec, out, ready = std::move(ready), failed = std::move(failed)](bool run) {
        if (!run) return failed(make_error(error_code::unavailable, "the server is shutting down"));
        if (out.cancelled()) return;  // the client left while the request waited for the worker
        engine::engine* e = app.engine();
        if (e == nullptr) return failed(make_error(error_code::unavailable, "the engine is not serving"));
        auto compiler = grammar::compiler_for_model(app.cfg().model.path, e->vocab_size(), e->eos_token_id());
        if (!compiler) return failed(make_error(error_code::internal, compiler.error().message()));
        auto compiled = (*compiler)->compile(spec);
        if (!compiled) return failed(compiled.error());
        ready(*e, std::move(*compiled));
    });
}

}  // namespace tandem::api
