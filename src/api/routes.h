// api/routes.h — The HTTP API: one table of every endpoint tandem serves.
#pragma once

#include <simdjson.h>

#include <optional>

#include "api/app_state.h"
#include "http/router.h"

namespace tandem::api {

http::router make_router(app_state& app);

// How an error status reads over HTTP: the status and OpenAI's `type` and `code` (empty: null).
struct api_error {
    int http_status;
    const char* type;
    const char* code;
};
api_error api_error_of(const status& st);

// Maps a status's error code to an HTTP status and sends it as an OpenAI error body (with the
// status's param).
void send_status_error(const http::responder& out, const status& st);

// parse_json_object (api/json_body.h), answering the 400 itself: nothing when the body was
// refused. The object lives as long as `parser`'s next use.
std::optional<simdjson::dom::object> json_object_or_400(simdjson::dom::parser& parser,
                                                        const http::request& req,
                                                        const http::responder& out);

}  // namespace tandem::api
