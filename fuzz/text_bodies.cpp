// Fuzz target: the bodies of POST /tokenize, /detokenize and /v1/chat/completions/render, each
// given the same input and read as their handlers read them (api/text_routes.cpp: a JSON object,
// then text/endpoints.h). Properties: no crash; every refusal a client error (4xx); every answer
// is valid JSON (UTF-8 included).
#include <simdjson.h>

#include "fuzz_support.h"
#include "text/endpoints.h"

using namespace tandem;

namespace {

void check_answer(const result<std::string>& r) {
    if (!fuzz::accepted(r)) return;
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    auto err = parser.parse(*r).get(doc);
    FUZZ_CHECK(!err, "not JSON ({}): {}", simdjson::error_message(err), *r);
}

}  // namespace

TANDEM_FUZZ_LOAD_TOKENIZER()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    fuzz::json_request request(data, size);  // what json_object_or_400 answers
    if (!request.object) return 0;
    std::string_view body = request.req.body;
    check_answer(text::tokenize_endpoint(body, tok));
    check_answer(text::detokenize_endpoint(body, tok));
    check_answer(text::render_endpoint(body, tok));
    return 0;
}
