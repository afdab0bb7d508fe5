// api/debug_routes.h — Fault injection for tests and drills, served only with
// server.debug_endpoints = true:
//   POST /debug/stall {"ms": N}   the scheduler stops making progress for N ms
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_debug_stall(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
