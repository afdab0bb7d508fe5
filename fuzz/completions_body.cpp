// Fuzz target: a POST /v1/completions body, read as handle_completions reads it (JSON object →
// generation options → prompts: text tokenized with added tokens, or token ids). Properties: no
// crash; every refusal a client error (4xx); every prompt non-empty and inside the vocabulary.
#include "api/generation_options.h"
#include "api/json_body.h"
#include "api/request_bodies.h"
#include "fuzz_support.h"

using namespace tandem;

namespace {
constexpr int32_t k_vocab = 129280;  // DeepSeek-V4's
}

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
    simdjson::dom::object obj = doc->get_object().value();
    auto opts = api::parse_generation_options(obj, api::api_kind::completion, 16);
    if (!opts) {
        FUZZ_CHECK(fuzz::is_client_error(opts.error()), "{}", opts.error().message());
        return 0;
    }
    auto prompts = api::read_prompts(obj, tok, k_vocab);
    if (!prompts) {
        FUZZ_CHECK(fuzz::is_client_error(prompts.error()), "{}", prompts.error().message());
        return 0;
    }
    FUZZ_CHECK(!prompts->empty());
    for (const auto& p : *prompts) {
        FUZZ_CHECK(!p.empty());
        for (int32_t id : p) FUZZ_CHECK(id >= 0 && id < k_vocab, "id {}", id);
    }
    return 0;
}
