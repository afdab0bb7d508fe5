#include "api/health_routes.h"

#include "core/json_writer.h"
#include "http/router.h"

namespace tandem::api {

void handle_health(app_state& app, const http::request&, const http::responder& out) {
    std::string problem;
    switch (app.state()) {
        case serving_state::starting: problem = "starting: " + app.state_detail(); break;
        case serving_state::stopping: problem = "stopping: the server is shutting down"; break;
        case serving_state::failed: problem = "failed: " + app.state_detail(); break;
        case serving_state::serving:
            if (app.server() && app.server()->stopping()) {
                problem = "stopping: the server is shutting down";
            } else if (auto p = app.liveness().problem(app.cfg().scheduler.stall_timeout_ms)) {
                problem = *p;
            } else if (topo::deployment* d = app.deployment()) {
                if (auto why = d->health_problem()) problem = *why;
            }
            break;
    }
    if (!problem.empty()) {
        http::send_error(out, 503, problem, "unavailable_error");
        return;
    }
    json_writer w;
    w.begin_object().key("status").value("ok").end_object();
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
