// api/generation_options.h — The sampling and output fields of OpenAI-style request bodies,
// validated once, with errors that name the field ("temperature must be in [0, 2]").
//
// Unknown fields are ignored (OpenAI clients send many); known fields with a wrong type or range
// are 400s. Chat and legacy completions differ only in how logprobs are asked for.
#pragma once

#include <simdjson.h>

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace tandem::api {

enum class api_kind { chat, completion, native };

struct generation_options {
    engine::sampling_params sampling;
    std::string model;               // as sent; empty when absent
    int64_t n = 1;                   // choices per prompt
    bool stream = false;
    bool include_usage = false;      // stream_options.include_usage
    std::vector<std::string> stop;   // stop strings (not included in the output)
    bool echo = false;               // completions: prepend the prompt (and its logprobs)
    bool echo_only = false;          // completions: max_tokens 0 with echo; sampling.max_tokens is 0
    bool skip_special_tokens = true;
    bool max_tokens_given = false;   // absent: the context limit bounds generation
};

// `default_max_tokens` applies when the body names neither max_tokens nor
// max_completion_tokens.
result<generation_options> parse_generation_options(const simdjson::dom::object& body,
                                                    api_kind kind, int64_t default_max_tokens);

}  // namespace tandem::api
