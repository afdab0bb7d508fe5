// api/health_routes.h — GET /health: 200 only while the process is serving and every loop is
// alive (core/liveness.h); otherwise 503 with the reason.
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_health(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
