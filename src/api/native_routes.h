// api/native_routes.h — tandem's native endpoints:
//   POST /generate          token ids in; token ids (and logprobs) out, streamed or whole
//   POST /abort_request     {"rid": "<X-Request-Id of the request>"} or {"abort_all": true}
//   GET  /health_generate   pushes one real token through the engine within a deadline
//   POST /flush_cache       drops the prefix cache (409 while requests hold cache state)
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_generate(app_state& app, const http::request& req, const http::responder& out);
void handle_abort_request(app_state& app, const http::request& req, const http::responder& out);
void handle_health_generate(app_state& app, const http::request& req, const http::responder& out);
void handle_flush_cache(app_state& app, const http::request& req, const http::responder& out);

// The engine requests go to, or why there is none (unavailable: starting, stopping, or a pd
// prefill-only process).
result<engine::engine*> serving_engine(const app_state& app);
// The same, answering the 503 itself (OpenAI error body) when there is none.
engine::engine* engine_or_503(app_state& app, const http::responder& out);

}  // namespace tandem::api
