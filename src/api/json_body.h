// api/json_body.h — Request bodies are JSON, parsed with simdjson's DOM. Any Content-Type is
// accepted (curl -d sends form encoding by default); what matters is that the body parses.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>

#include "core/status.h"
#include "http/http_message.h"
#include "http/server.h"

namespace tandem::api {

// Parses the body into `parser`'s document; the element lives as long as the parser's next use.
// Errors name what is wrong ("request body is not valid JSON: ...", "must be a JSON object").
result<simdjson::dom::element> parse_json_object(simdjson::dom::parser& parser,
                                                 const http::request& req);

// The same, answering the 400 itself: nothing when the body was refused.
std::optional<simdjson::dom::object> json_object_or_400(simdjson::dom::parser& parser,
                                                        const http::request& req,
                                                        const http::responder& out);

}  // namespace tandem::api
