// api/openai_common.h — Small pieces shared by the OpenAI endpoints.
#pragma once

#include <string>
#include <vector>

#include "api/app_state.h"
#include "api/generation_options.h"

namespace tandem::api {

// A request naming another model than the served one is a 404, as in OpenAI's API.
status check_model_name(const app_state& app, const std::string& requested);

// One engine request for choice `index` of a prompt. With a seed, choice i samples with
// seed + i, so n > 1 gives n different choices and each is reproducible on its own.
engine::submit_request make_submit(const std::vector<int32_t>& prompt, const generation_options& o,
                                   int64_t index, const std::string& trace_id,
                                   const engine::engine& eng);

// A token as text for logprobs (its bytes, lossily decoded).
std::string token_text(const text::tokenizer& tok, int32_t id);

}  // namespace tandem::api
