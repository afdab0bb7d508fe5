// api/routes.h — The HTTP API: one table of every endpoint tandem serves.
#pragma once

#include "api/app_state.h"
#include "http/router.h"

namespace tandem::api {

http::router make_router(app_state& app);

// Maps a status's error code to an HTTP status and sends it as an OpenAI error body.
void send_status_error(const http::responder& out, const status& st);

}  // namespace tandem::api
