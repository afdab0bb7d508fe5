#include "api/json_body.h"

#include <fmt/format.h>

#include "api/routes.h"

namespace tandem::api {

result<simdjson::dom::element> parse_json_object(simdjson::dom::parser& parser,
                                                 const http::request& req) {
    if (req.body.empty()) {
        return make_error(error_code::invalid_argument, "request body is empty; expected a JSON object");
    }
    simdjson::dom::element doc;
    auto err = parser.parse(req.body).get(doc);
    if (err) {
        return make_error(error_code::invalid_argument,
                          fmt::format("request body is not valid JSON: {}", simdjson::error_message(err)));
    }
    if (!doc.is_object()) {
        return make_error(error_code::invalid_argument, "request body must be a JSON object");
    }
    return doc;
}

std::optional<simdjson::dom::object> json_object_or_400(simdjson::dom::parser& parser,
                                                        const http::request& req,
                                                        const http::responder& out) {
    auto doc = parse_json_object(parser, req);
    if (!doc) {
        send_status_error(out, doc.error());
        return std::nullopt;
    }
    return doc->get_object().value();
}

}  // namespace tandem::api
