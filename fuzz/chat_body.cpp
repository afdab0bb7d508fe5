// Fuzz target: a POST /v1/chat/completions body, read as handle_chat_completions reads it (JSON
// object → generation options → chat request → the shared chat pipeline: rendered prompt,
// tokenized, output grammar). Properties: no crash; every refusal a client error (4xx).
#include "api/chat_pipeline.h"
#include "api/generation_options.h"
#include "api/json_body.h"
#include "fuzz_support.h"
#include "text/chat.h"

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
    auto opts = api::parse_generation_options(doc->get_object().value(), api::api_kind::chat, 0);
    if (!opts) {
        FUZZ_CHECK(fuzz::is_client_error(opts.error()), "{}", opts.error().message());
        return 0;
    }
    auto chat = text::chat_request_from_openai_json(req.body);
    if (!chat) {
        FUZZ_CHECK(fuzz::is_client_error(chat.error()), "{}", chat.error().message());
        return 0;
    }
    auto pipeline = api::prepare_chat(*chat, *opts, tok, 1);
    if (!pipeline) {
        FUZZ_CHECK(fuzz::is_client_error(pipeline.error()), "{}", pipeline.error().message());
        return 0;
    }
    for (int32_t id : pipeline->prompt_ids) FUZZ_CHECK(tok.contains(id), "id {}", id);
    return 0;
}
