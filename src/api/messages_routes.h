// api/messages_routes.h — Anthropic's Messages API (what DeepSeek's API offers Claude Code and
// similar agents), on the chat pipeline:
//   POST /v1/messages               generate; whole or streamed with Anthropic's event sequence
//   POST /v1/messages/count_tokens  {"input_tokens": N} for a Messages body
//   POST /v1/messages/render        {"prompt", "tokens"}: what the model would receive
// Errors have Anthropic's shape: {"type":"error","error":{"type":"invalid_request_error",...}}.
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_messages(app_state& app, const http::request& req, const http::responder& out);
void handle_messages_count_tokens(app_state& app, const http::request& req, const http::responder& out);
void handle_messages_render(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
