// api/metrics_routes.h — GET /metrics in the Prometheus text format (version 0.0.4).
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_metrics(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
