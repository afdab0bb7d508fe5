#include "api/serve.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <thread>

#include "api/app_state.h"
#include "api/routes.h"
#include "cuda/host/cuda_startup.h"
#include "core/log.h"
#include "http/server.h"
#include "cache/plan_command.h"
#include "text/tokenizer.h"
#include "topo/deployment.h"

namespace tandem::api {
namespace {

http::server_limits limits_from(const config& cfg) {
    http::server_limits l;
    l.max_connections = cfg.server.max_connections;
    l.max_header_bytes = cfg.server.max_header_bytes;
    l.max_body_bytes = cfg.server.max_body_bytes;
    l.request_timeout_ms = cfg.server.request_timeout_ms;
    l.idle_timeout_ms = cfg.server.idle_timeout_ms;
    l.shutdown_grace_ms = cfg.server.shutdown_grace_ms;
    l.access_log = cfg.logging.access_log;
    return l;
}

// Chooses the compute backend (cuda/host/cuda_startup.h): "cuda" without a usable GPU (or in a
// build without CUDA) is a startup error; "auto" logs why it chose what it chose. The answer is
// written back into backend.device ("cpu" | "cuda") for the deployment to build that engine, and
// on a GPU with cache.memory_bytes = 0 the pool budget phase 0 resolved from the GPU's free
// memory into cache.memory_bytes (the host rule would size a device pool from host memory).
status choose_backend(config& cfg) {
    result<cuda::device_choice> choice = cuda::resolve_backend_at_startup(cfg);
    if (!choice) return choice.error();
    const bool gpu = choice->device == cuda::backend_device::cuda;
    TANDEM_LOG_INFO("backend: {} ({}; {} threads)", gpu ? "cuda" : "cpu", choice->reason,
                    cfg.backend.threads > 0 ? cfg.backend.threads
                                            : static_cast<int64_t>(std::thread::hardware_concurrency()));
    cfg.backend.device = gpu ? "cuda" : "cpu";
    if (choice->device_pool_bytes > 0) cfg.cache.memory_bytes = choice->device_pool_bytes;
    return status::ok();
}

// Each connection is a descriptor; the usual soft limit of 1024 would cap concurrent clients
// far below server.max_connections.
void raise_descriptor_limit(int64_t wanted) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
    rlim_t target = std::min<rlim_t>(lim.rlim_max, static_cast<rlim_t>(wanted) + 64);
    if (target > lim.rlim_cur) {
        lim.rlim_cur = target;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    getrlimit(RLIMIT_NOFILE, &lim);
    if (static_cast<int64_t>(lim.rlim_cur) < wanted) {
        TANDEM_LOG_WARN("open-file limit {} is below server.max_connections = {}",
                        static_cast<int64_t>(lim.rlim_cur), wanted);
    }
}

// Loading runs beside the HTTP loop, so /health can say "starting" (503) instead of refusing
// connections while a large checkpoint loads.
status load_serving_state(app_state& app, std::unique_ptr<topo::deployment>* out) {
    const config& cfg = app.cfg();
    std::string tok_path = cfg.model.path + "/tokenizer.json";
    app.set_state(serving_state::starting, "loading the tokenizer from " + tok_path);
    auto tok = text::tokenizer::load_file(tok_path);
    if (!tok) return tok.error().with_context("model.path = \"" + cfg.model.path + "\"");
    app.attach_tokenizer(*tok);
    TANDEM_LOG_INFO("tokenizer: {} ids from {}", (*tok)->id_count(), tok_path);

    app.set_state(serving_state::starting, "planning the cache layout");
    auto plan = cache::make_cache_plan(cfg);
    if (!plan) return plan.error();
    std::string summary = cache::render_plan_text(*plan);
    for (size_t start = 0; start < summary.size();) {  // one log line per summary line
        size_t end = summary.find('\n', start);
        if (end == std::string::npos) end = summary.size();
        TANDEM_LOG_INFO("{}", std::string_view(summary).substr(start, end - start));
        start = end + 1;
    }

    app.set_state(serving_state::starting, "loading the model from " + cfg.model.path);
    auto dep = topo::deployment::create(cfg, app.liveness());
    if (!dep) return dep.error().with_context("model.path = \"" + cfg.model.path + "\"");
    *out = std::move(*dep);
    TANDEM_LOG_INFO("topology: {}", (*out)->describe());
    app.attach_deployment(out->get());
    app.attach_engine((*out)->api_engine());
    return status::ok();
}

}  // namespace

int run_server(const config& cfg) {
    if (status st = topo::validate_topology(cfg); !st) {
        TANDEM_LOG_ERROR("startup failed: {}", st.message());
        return 2;
    }
    config served = cfg;
    if (status chosen = choose_backend(served); !chosen.is_ok()) {
        TANDEM_LOG_ERROR("startup failed: {}", chosen.message());
        return 1;
    }
    app_state app(served);
    raise_descriptor_limit(cfg.server.max_connections);
    http::router routes = make_router(app);
    http::server srv(limits_from(cfg), [&routes](const http::request& req, http::responder out) {
        routes(req, std::move(out));
    });
    app.attach_server(&srv);
    auto http_loop = app.liveness().add("http");
    result<int> port = srv.listen(cfg.server.host, static_cast<int>(cfg.server.port));
    if (!port) {
        TANDEM_LOG_ERROR("startup failed: {}", port.error().message());
        return 1;
    }
    TANDEM_LOG_INFO("listening on http://{}:{} (topology {}, model {})", cfg.server.host, *port,
                    cfg.topology.mode, cfg.model.served_name);
    int exit_code = 0;
    std::unique_ptr<topo::deployment> dep;  // outlives the HTTP loop: in-flight requests drain first
    std::thread loader([&] {
        status st = load_serving_state(app, &dep);
        if (!st) {
            TANDEM_LOG_ERROR("startup failed: {}", st.message());
            app.set_state(serving_state::failed, st.message());
            exit_code = 1;
            srv.shutdown();
            return;
        }
        app.set_state(serving_state::serving);
        TANDEM_LOG_INFO("serving");
    });
    srv.run();
    app.grammar_work().stop();  // no compile may reach the engine once it starts going away
    loader.join();
    app.attach_engine(nullptr);
    app.attach_deployment(nullptr);
    dep.reset();  // stops the engines; requests still queued end with an error event
    if (exit_code == 0) {
        app.set_state(serving_state::stopping);
        TANDEM_LOG_INFO("shut down cleanly");
    }
    return exit_code;
}

}  // namespace tandem::api
