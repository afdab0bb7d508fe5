#include "api/json_body.h"

#include <fmt/format.h>

#include "text/json_value.h"

namespace tandem::api {

result<simdjson::dom::element> parse_json_object(simdjson::dom::parser& parser,
                                                 const http::request& req) {
    if (req.body.empty()) {
        return make_error(error_code::invalid_argument, "request body is empty; expected a JSON object");
    }
    simdjson::dom::element doc;
    auto err = parser.parse(req.body).get(doc);
    if (err == simdjson::NUMBER_ERROR) {
        // simdjson refuses integers beyond 64 bits, which JSON (and DeepSeek's API, in tool
        // schemas) allows. The full parser keeps them; written back they read as floats, the
        // way serde_json reads them.
        if (auto full = text::json_parse(req.body)) {
            err = parser.parse(text::json_dump(*full, text::json_number_style::recipe)).get(doc);
        }
    }
    if (err) {
        return make_error(error_code::invalid_argument,
                          fmt::format("request body is not valid JSON: {}", simdjson::error_message(err)));
    }
    if (!doc.is_object()) {
        return make_error(error_code::invalid_argument, "request body must be a JSON object");
    }
    return doc;
}

result<std::vector<int32_t>> read_token_ids(simdjson::dom::element e, std::string_view field,
                                            int32_t vocab) {
    if (!e.is_array()) {
        return make_error(error_code::invalid_argument,
                          fmt::format("'{}' must be an array of token ids", field));
    }
    std::vector<int32_t> ids;
    simdjson::dom::array arr = e.get_array().value();
    for (simdjson::dom::element t : arr) {
        if (!t.is_int64() || t.get_int64().value() < 0 || t.get_int64().value() >= vocab) {
            return make_error(error_code::invalid_argument,
                              fmt::format("'{}[{}]' must be a token id in [0, {})", field, ids.size(), vocab));
        }
        ids.push_back(static_cast<int32_t>(t.get_int64().value()));
    }
    return ids;
}

}  // namespace tandem::api
