// api/chat_routes.h — POST /v1/chat/completions: messages → the DeepSeek-V4 prompt (text/chat.h)
// → engine → the output parser (text/output_parser.h) → reasoning_content, content and
// tool_calls, streamed as chat.completion.chunk deltas or returned whole.
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_chat_completions(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
