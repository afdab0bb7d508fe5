// text/endpoints.h — JSON-in/JSON-out bodies of the text endpoints (shapes as in vLLM), so the
// HTTP layer only routes and maps errors (invalid_argument -> 400).
//
//   POST /tokenize                    {"prompt": "..."}            -> {"tokens": [...], "count": n}
//                                     or a chat body with messages -> the rendered prompt's ids
//   POST /detokenize                  {"tokens": [...]}            -> {"prompt": "..."}
//   POST /v1/chat/completions/render  chat completions body        -> {"prompt": "...", "tokens": [...]}
//
// A raw "prompt" is tokenized with added-token matching (it is how a client tokenizes a prompt
// it rendered itself, as vLLM/HF do); chat bodies go through render_chat(), where user text
// never becomes special tokens. No BOS is added (DeepSeek-V4's add_bos_token is false).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "text/tokenizer.h"

namespace tandem::text {

result<std::string> tokenize_endpoint(std::string_view body, const tokenizer& tok);
result<std::string> detokenize_endpoint(std::string_view body, const tokenizer& tok);
result<std::string> render_endpoint(std::string_view body, const tokenizer& tok);

}  // namespace tandem::text
