// Fuzz target: a POST /v1/messages body (Anthropic), read as handle_messages reads it (JSON
// object → messages request → the shared chat pipeline). Properties: no crash; every refusal a
// client error (4xx).
#include "api/chat_pipeline.h"
#include "api/messages_request.h"
#include "fuzz_support.h"

using namespace tandem;

TANDEM_FUZZ_LOAD_TOKENIZER()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    fuzz::json_request body(data, size);
    if (!body.object) return 0;
    auto request = api::messages_request_from_json(body.req.body, *body.object);
    if (!fuzz::accepted(request)) return 0;
    FUZZ_CHECK(request->opts.n == 1);
    (void)fuzz::accepted(api::prepare_chat(request->chat, request->opts, tok, 1));
    return 0;
}
