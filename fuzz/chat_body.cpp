// Fuzz target: a POST /v1/chat/completions body, read as handle_chat_completions reads it (JSON
// object → generation options → chat request → the shared chat pipeline: rendered prompt,
// tokenized, output grammar). Properties: no crash; every refusal a client error (4xx).
#include "api/chat_pipeline.h"
#include "api/generation_options.h"
#include "fuzz_support.h"
#include "text/chat.h"

using namespace tandem;

TANDEM_FUZZ_LOAD_TOKENIZER()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    fuzz::json_request body(data, size);
    if (!body.object) return 0;
    auto opts = api::parse_generation_options(*body.object, api::api_kind::chat, 0);
    if (!fuzz::accepted(opts)) return 0;
    auto chat = text::chat_request_from_openai_json(body.req.body);
    if (!fuzz::accepted(chat)) return 0;
    auto pipeline = api::prepare_chat(*chat, *opts, tok, 1);
    if (!fuzz::accepted(pipeline)) return 0;
    for (int32_t id : pipeline->prompt_ids) FUZZ_CHECK(tok.contains(id), "id {}", id);
    return 0;
}
