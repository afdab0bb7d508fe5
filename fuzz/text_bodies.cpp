// Fuzz target: the bodies of POST /tokenize, /detokenize and /v1/chat/completions/render, each
// given the same input and read as their handlers read them (api/text_routes.cpp: a JSON object,
// then text/endpoints.h). Properties: no crash; every refusal a client error (4xx); every answer
// is valid JSON (UTF-8 included).
#include <simdjson.h>

#include "api/json_body.h"
#include "fuzz_support.h"
#include "text/endpoints.h"

using namespace tandem;

namespace {

void check_answer(const result<std::string>& r) {
    if (!r) {
        FUZZ_CHECK(fuzz::is_client_error(r.error()), "{}", r.error().message());
        return;
    }
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    auto err = parser.parse(*r).get(doc);
    FUZZ_CHECK(!err, "not JSON ({}): {}", simdjson::error_message(err), *r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    http::request req;
    req.body.assign(reinterpret_cast<const char*>(data), size);
    simdjson::dom::parser parser;
    auto doc = api::parse_json_object(parser, req);  // what json_object_or_400 answers
    if (!doc) {
        FUZZ_CHECK(fuzz::is_client_error(doc.error()), "{}", doc.error().message());
        return 0;
    }
    std::string_view body = req.body;
    check_answer(text::tokenize_endpoint(body, tok));
    check_answer(text::detokenize_endpoint(body, tok));
    check_answer(text::render_endpoint(body, tok));
    return 0;
}
