// api/json_body.h — Request bodies are JSON, parsed with simdjson's DOM. Any Content-Type is
// accepted (curl -d sends form encoding by default); what matters is that the body parses.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/http_message.h"

namespace tandem::api {

// Parses the body into `parser`'s document; the element lives as long as the parser's next use.
// Errors name what is wrong ("request body is not valid JSON: ...", "must be a JSON object").
result<simdjson::dom::element> parse_json_object(simdjson::dom::parser& parser,
                                                 const http::request& req);

// A JSON array of token ids, each in [0, vocab). Errors name `field` and the bad index
// ("'input_ids[3]' must be a token id in [0, 129280)"). An empty array is allowed here.
result<std::vector<int32_t>> read_token_ids(simdjson::dom::element e, std::string_view field,
                                            int32_t vocab);

}  // namespace tandem::api
