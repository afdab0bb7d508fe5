// api/request_bodies.h — The fields of the completion and native request bodies that are read
// before anything is submitted: prompts and token ids, and /generate's whole body. The route
// handlers call these, and so do the fuzz harnesses (fuzz/), so both read bodies the same way.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <vector>

#include "api/generation_options.h"
#include "core/status.h"
#include "text/tokenizer.h"

namespace tandem::api {

// /v1/completions "prompt": a string, a token-id array, or a batch of either; none empty.
result<std::vector<std::vector<int32_t>>> read_prompts(const simdjson::dom::object& body,
                                                      const text::tokenizer& tok, int32_t vocab);

// /generate "input_ids": a non-empty array of token ids in [0, vocab).
result<std::vector<int32_t>> read_input_ids(const simdjson::dom::object& body, int32_t vocab);

struct generate_body {
    std::vector<int32_t> input_ids;
    generation_options opts;  // from "sampling_params" (an object; absent means defaults)
    bool stream = false;
};
result<generate_body> read_generate_body(const simdjson::dom::object& body, int32_t vocab);

}  // namespace tandem::api
