// api/app_state.h — What every API handler may read: the configuration, whether the process is
// starting, serving or stopping, and the liveness of every loop. Owned by serve.cpp; handlers
// get a const reference and never outlive it.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/abort_tombstones.h"
#include "api/grammar_jobs.h"
#include "core/config.h"
#include "core/liveness.h"
#include "engine/engine.h"
#include "text/tokenizer.h"
#include "http/server.h"
#include "topo/deployment.h"

namespace tandem::api {

enum class serving_state {
    starting,  // listening, but the model or engines are not ready yet
    serving,   // ready for requests
    stopping,  // SIGINT/SIGTERM received: draining
    failed,    // startup failed; the process is about to exit
};

class app_state {
public:
    explicit app_state(config cfg) : cfg_(std::move(cfg)) {}

    const config& cfg() const { return cfg_; }
    liveness_registry& liveness() { return liveness_; }
    const liveness_registry& liveness() const { return liveness_; }

    serving_state state() const { return state_.load(); }
    void set_state(serving_state s, std::string detail = {});
    std::string state_detail() const;

    // Model outputs whose tool-call markup could not be parsed (returned as content).
    std::atomic<int64_t> tool_call_parse_failures{0};

    void attach_server(const http::server* srv) { server_ = srv; }
    const http::server* server() const { return server_; }

    // Set at startup, before serving; null while starting.
    void attach_tokenizer(std::shared_ptr<const text::tokenizer> tok) { std::atomic_store(&tokenizer_, std::move(tok)); }
    std::shared_ptr<const text::tokenizer> tokenizer() const { return std::atomic_load(&tokenizer_); }

    // Set once the model is loaded and the engine runs; null while starting.
    void attach_engine(engine::engine* e) { engine_.store(e); }
    engine::engine* engine() const { return engine_.load(); }

    // The topology behind the engine (pd health, metrics, a prefill-only process); null while
    // starting.
    void attach_deployment(topo::deployment* d) { deployment_.store(d); }
    topo::deployment* deployment() const { return deployment_.load(); }

    // Grammar compilations off the HTTP loop (constrained decoding); stopped by run_server
    // before the engine goes away.
    grammar_jobs& grammar_work() { return grammar_jobs_; }

    // Which engine requests serve which HTTP request (for /abort_request and disconnects).
    // track() answers true when an abort for `http_id` came before the request (a tombstone, see
    // abort_tombstones.h): the caller aborts `id` at once.
    [[nodiscard]] bool track(const std::string& http_id, engine::request_id id);
    void untrack(const std::string& http_id, engine::request_id id);
    std::vector<engine::request_id> tracked_all() const;

    // /abort_request {"rid": http_id}: the engine requests to abort now, or — when none is
    // tracked yet — a pending abort recorded for a request still on its way in.
    struct abort_plan {
        std::vector<engine::request_id> running;  // abort these now
        bool pending = false;                     // nothing tracked: a tombstone was recorded
    };
    abort_plan plan_abort(const std::string& http_id);

private:
    config cfg_;
    liveness_registry liveness_;
    std::atomic<serving_state> state_{serving_state::starting};
    mutable std::mutex detail_mu_;
    std::string detail_ = "starting";
    const http::server* server_ = nullptr;
    std::atomic<engine::engine*> engine_{nullptr};
    std::atomic<topo::deployment*> deployment_{nullptr};
    std::shared_ptr<const text::tokenizer> tokenizer_;
    mutable std::mutex tracked_mu_;
    std::unordered_map<std::string, std::vector<engine::request_id>> tracked_;
    abort_tombstones tombstones_;  // under tracked_mu_
    grammar_jobs grammar_jobs_;  // last: its thread stops before anything it uses goes away
};

}  // namespace tandem::api
