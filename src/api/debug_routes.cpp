#include "api/debug_routes.h"

#include "api/json_body.h"
#include "api/native_routes.h"
#include "api/routes.h"
#include "core/json_writer.h"
#include "core/log.h"

namespace tandem::api {

void handle_debug_stall(app_state& app, const http::request& req, const http::responder& out) {
    engine::engine* e = engine_or_503(app, out);
    if (!e) return;
    simdjson::dom::parser parser;
    auto body = json_object_or_400(parser, req, out);
    if (!body) return;
    int64_t ms = 0;
    if ((*body)["ms"].get(ms) || ms < 0 || ms > 600000) {
        return send_status_error(out, make_error(error_code::invalid_argument,
                                                 "'ms' must be an integer in [0, 600000]"));
    }
    TANDEM_LOG_WARN("debug: stalling the scheduler for {} ms", ms);
    e->inject_stall(ms);
    json_writer w;
    w.begin_object().key("stall_ms").value(ms).end_object();
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
