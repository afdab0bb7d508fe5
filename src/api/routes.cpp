#include "api/routes.h"

#include "api/chat_routes.h"
#include "api/completions_routes.h"
#include "api/debug_routes.h"
#include "api/health_routes.h"
#include "api/metrics_routes.h"
#include "api/model_routes.h"
#include "api/native_routes.h"
#include "api/text_routes.h"

namespace tandem::api {

http::router make_router(app_state& app) {
    http::router r;
    // method  path            handler
    r.add("GET", "/health",    [&app](auto& req, auto out) { handle_health(app, req, out); });
    r.add("GET", "/v1/models", [&app](auto& req, auto out) { handle_models(app, req, out); });
    r.add("GET", "/metrics",         [&app](auto& req, auto out) { handle_metrics(app, req, out); });
    r.add("GET", "/health_generate", [&app](auto& req, auto out) { handle_health_generate(app, req, out); });
    r.add("POST", "/v1/chat/completions",
                                    [&app](auto& req, auto out) { handle_chat_completions(app, req, out); });
    r.add("POST", "/v1/completions", [&app](auto& req, auto out) { handle_completions(app, req, out); });
    r.add("POST", "/generate",      [&app](auto& req, auto out) { handle_generate(app, req, out); });
    r.add("POST", "/tokenize",      [&app](auto& req, auto out) { handle_tokenize(app, req, out); });
    r.add("POST", "/detokenize",    [&app](auto& req, auto out) { handle_detokenize(app, req, out); });
    r.add("POST", "/v1/chat/completions/render",
                                    [&app](auto& req, auto out) { handle_render(app, req, out); });
    r.add("POST", "/abort_request", [&app](auto& req, auto out) { handle_abort_request(app, req, out); });
    r.add("POST", "/flush_cache",   [&app](auto& req, auto out) { handle_flush_cache(app, req, out); });
    if (app.cfg().server.debug_endpoints) {
        r.add("POST", "/debug/stall", [&app](auto& req, auto out) { handle_debug_stall(app, req, out); });
    }
    return r;
}

void send_status_error(const http::responder& out, const status& st) {
    int http_status = 500;
    const char* type = "internal_error";
    switch (st.code()) {
        case error_code::invalid_argument:
        case error_code::out_of_range:
            http_status = 400; type = "invalid_request_error"; break;
        case error_code::not_found: http_status = 404; type = "not_found_error"; break;
        case error_code::too_large: http_status = 413; type = "invalid_request_error"; break;
        case error_code::unavailable:
            // Overload and shutdown are retryable, distinct from failures (invariant 11).
            http::send_error(out, 503, st.message(), "unavailable_error", {{"Retry-After", "1"}});
            return;
        case error_code::deadline_exceeded: http_status = 504; type = "timeout_error"; break;
        default: break;
    }
    http::send_error(out, http_status, st.message(), type);
}

}  // namespace tandem::api
