// api/app_state.h — What every API handler may read: the configuration, whether the process is
// starting, serving or stopping, and the liveness of every loop. Owned by serve.cpp; handlers
// get a const reference and never outlive it.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "core/config.h"
#include "core/liveness.h"
#include "http/server.h"

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

    void attach_server(const http::server* srv) { server_ = srv; }
    const http::server* server() const { return server_; }

private:
    config cfg_;
    liveness_registry liveness_;
    std::atomic<serving_state> state_{serving_state::starting};
    mutable std::mutex detail_mu_;
    std::string detail_ = "starting";
    const http::server* server_ = nullptr;
};

}  // namespace tandem::api
