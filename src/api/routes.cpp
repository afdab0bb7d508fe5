#include "api/routes.h"

#include "api/chat_routes.h"
#include "api/completions_routes.h"
#include "api/debug_routes.h"
#include "api/health_routes.h"
#include "api/json_body.h"
#include "api/messages_routes.h"
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
    r.add("GET", "/v1/models/*",    [&app](auto& req, auto out) { handle_model(app, req, out); });
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
    r.add("POST", "/v1/messages",   [&app](auto& req, auto out) { handle_messages(app, req, out); });
    r.add("POST", "/v1/messages/count_tokens",
                                    [&app](auto& req, auto out) { handle_messages_count_tokens(app, req, out); });
    r.add("POST", "/v1/messages/render",
                                    [&app](auto& req, auto out) { handle_messages_render(app, req, out); });
    r.add("POST", "/abort_request", [&app](auto& req, auto out) { handle_abort_request(app, req, out); });
    r.add("POST", "/flush_cache",   [&app](auto& req, auto out) { handle_flush_cache(app, req, out); });
    if (app.cfg().server.debug_endpoints) {
        r.add("POST", "/debug/stall", [&app](auto& req, auto out) { handle_debug_stall(app, req, out); });
    }
    return r;
}

api_error api_error_of(const status& st) {
    api_error e{500, "internal_error", ""};
    switch (st.code()) {
        case error_code::invalid_argument:
        case error_code::out_of_range: e = {400, "invalid_request_error", ""}; break;
        case error_code::not_found:
            // OpenAI answers an unknown model as a request error with this code.
            if (st.param() == "model") e = {404, "invalid_request_error", "model_not_found"};
            else e = {404, "not_found_error", ""};
            break;
        case error_code::too_large: e = {413, "invalid_request_error", ""}; break;
        case error_code::unavailable: e = {503, "unavailable_error", ""}; break;
        case error_code::deadline_exceeded: e = {504, "timeout_error", ""}; break;
        default: break;
    }
    return e;
}

void send_status_error(const http::responder& out, const status& st) {
    const api_error e = api_error_of(st);
    http::header_list headers;
    // Overload and shutdown are retryable, distinct from failures (invariant 11).
    if (e.http_status == 503) headers.emplace_back("Retry-After", "1");
    out.send({e.http_status, std::move(headers), http::error_body(st.message(), e.type, st.param(), e.code)});
}

std::optional<simdjson::dom::object> json_object_or_400(simdjson::dom::parser& parser,
                                                        const http::request& req,
                                                        const http::responder& out) {
    auto doc = parse_json_object(parser, req);
    if (!doc) {
        send_status_error(out, doc.error());
        return std::nullopt;
    }
    return doc->get_object().value();
}

}  // namespace tandem::api
