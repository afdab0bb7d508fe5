// api/completions_routes.h — POST /v1/completions: text or token-id prompts (one or a batch),
// n choices each, streaming or whole, logprobs, and echo (with the prompt's own logprobs when
// logprobs are asked for, as OpenAI's legacy API does).
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_completions(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
