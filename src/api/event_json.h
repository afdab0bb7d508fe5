// api/event_json.h — JSON pieces shared by the generation endpoints: logprobs, usage, SSE framing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json_writer.h"
#include "engine/engine.h"

namespace tandem::api {

// [{"token":5,"logprob":-0.1,"top_logprobs":[{"token":5,"logprob":-0.1},...]}, ...]
void write_token_logprobs(json_writer& w, const std::vector<engine::position_logprobs>& lps);
void write_usage(json_writer& w, int64_t prompt_tokens, int64_t completion_tokens);
// "data: <json>\n\n"
std::string sse_data(std::string_view json);
inline constexpr std::string_view k_sse_done = "data: [DONE]\n\n";

}  // namespace tandem::api
