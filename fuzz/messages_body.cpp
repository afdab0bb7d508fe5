// Fuzz target: a POST /v1/messages body (Anthropic), read as handle_messages reads it (JSON
// object → messages request → the shared chat pipeline). Properties: no crash; every refusal a
// client error (4xx).
#include "api/chat_pipeline.h"
#include "api/json_body.h"
#include "api/messages_request.h"
#include "fuzz_support.h"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    http::request req;
    req.body.assign(reinterpret_cast<const char*>(data), size);
    simdjson::dom::parser parser;
    auto doc = api::parse_json_object(parser, req);
    if (!doc) {
        FUZZ_CHECK(fuzz::is_client_error(doc.error()), "{}", doc.error().message());
        return 0;
    }
    auto request = api::messages_request_from_json(req.body, doc->get_object().value());
    if (!request) {
        FUZZ_CHECK(fuzz::is_client_error(request.error()), "{}", request.error().message());
        return 0;
    }
    FUZZ_CHECK(request->opts.n == 1);
    auto pipeline = api::prepare_chat(request->chat, request->opts, tok, 1);
    if (!pipeline) {
        FUZZ_CHECK(fuzz::is_client_error(pipeline.error()), "{}", pipeline.error().message());
    }
    return 0;
}
