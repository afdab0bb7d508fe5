#include "api/request_bodies.h"

#include <fmt/format.h>

#include "api/json_body.h"

namespace tandem::api {

using simdjson::dom::element;

result<std::vector<std::vector<int32_t>>> read_prompts(const simdjson::dom::object& body,
                                                      const text::tokenizer& tok, int32_t vocab) {
    element e;
    if (body["prompt"].get(e)) {
        return make_error(error_code::invalid_argument, "'prompt' is required");
    }
    auto ids_of = [&](element item, const std::string& where) -> result<std::vector<int32_t>> {
        if (item.is_string()) return tok.encode_with_added_tokens(item.get_string().value());
        if (!item.is_array()) {
            return make_error(error_code::invalid_argument,
                              fmt::format("'{}' must be a string or an array of token ids", where));
        }
        return read_token_ids(item, where, vocab);
    };
    std::vector<std::vector<int32_t>> prompts;
    bool batch = e.is_array() && e.get_array().value().size() > 0 &&
                 !e.get_array().value().at(0).value().is_int64();
    if (!batch) {
        auto one = ids_of(e, "prompt");
        if (!one) return one.error();
        prompts.push_back(std::move(*one));
    } else {
        simdjson::dom::array arr = e.get_array().value();
        for (element item : arr) {
            auto one = ids_of(item, fmt::format("prompt[{}]", prompts.size()));
            if (!one) return one.error();
            prompts.push_back(std::move(*one));
        }
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (prompts[i].empty()) {
            return make_error(error_code::invalid_argument, "the prompt must not be empty");
        }
    }
    return prompts;
}

result<std::vector<int32_t>> read_input_ids(const simdjson::dom::object& body, int32_t vocab) {
    element e;
    if (body["input_ids"].get(e)) {
        return make_error(error_code::invalid_argument, "'input_ids' must be an array of token ids");
    }
    auto ids = read_token_ids(e, "input_ids", vocab);
    if (ids && ids->empty()) return make_error(error_code::invalid_argument, "'input_ids' must not be empty");
    return ids;
}

result<generate_body> read_generate_body(const simdjson::dom::object& body, int32_t vocab) {
    generate_body out;
    auto ids = read_input_ids(body, vocab);
    if (!ids) return ids.error();
    out.input_ids = std::move(*ids);
    element el;
    // Absent sampling_params are an empty object parsed by a parser of its own: parsing it with
    // the body's parser would overwrite the document `body` points into.
    simdjson::dom::parser defaults_parser;
    simdjson::dom::object params;
    if (!body["sampling_params"].get(el)) {
        if (!el.is_object()) {
            return make_error(error_code::invalid_argument, "'sampling_params' must be an object");
        }
        params = el.get_object().value();
    } else {
        params = defaults_parser.parse(std::string_view("{}")).value().get_object().value();
    }
    auto opts = parse_generation_options(params, api_kind::native, 16);
    if (!opts) return opts.error();
    out.opts = std::move(*opts);
    out.stream = !body["stream"].get(el) && el.is_bool() && el.get_bool().value();
    return out;
}

}  // namespace tandem::api
