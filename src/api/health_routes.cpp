#include "api/health_routes.h"

#include <fmt/format.h>

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
    w.begin_object().key("status").value("ok");
    // A divergence found by shadow verification is a warning, not a 503: the server still
    // answers, but an operator must know its state paths produced wrong logits.
    if (engine::engine* e = app.engine()) {
        const engine::verify_report v = e->verification();
        if (int64_t n = v.total_divergences(); n > 0) {
            std::string by_path;
            for (int p = 0; p < engine::k_verify_paths; ++p) {
                if (v.divergences[p] == 0) continue;
                by_path += fmt::format("{}{} {}", by_path.empty() ? "" : ", ",
                                       engine::verify_path_name(static_cast<engine::verify_path>(p)),
                                       v.divergences[p]);
            }
            w.key("warnings").begin_array().value(fmt::format(
                "shadow verification found {} silent-corruption divergence(s) in {} checks ({}); "
                "last: {}", n, v.checks, by_path, v.last_divergence)).end_array();
        }
    }
    w.end_object();
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
