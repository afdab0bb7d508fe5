// api/text_routes.h — The text endpoints (shapes as in vLLM):
//   POST /tokenize                       {"prompt": text} or a chat body → {"tokens", "count"}
//   POST /detokenize                     {"tokens": [...]} → {"prompt": text}
//   POST /v1/chat/completions/render     a chat body → {"prompt", "tokens"}: the model's exact input
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_tokenize(app_state& app, const http::request& req, const http::responder& out);
void handle_detokenize(app_state& app, const http::request& req, const http::responder& out);
void handle_render(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
