// Fuzz target: a POST /v1/completions body, read as handle_completions reads it (JSON object →
// generation options → prompts: text tokenized with added tokens, or token ids). Properties: no
// crash; every refusal a client error (4xx); every prompt non-empty and inside the vocabulary.
#include "api/generation_options.h"
#include "api/request_bodies.h"
#include "fuzz_support.h"

using namespace tandem;

namespace {
constexpr int32_t k_vocab = 129280;  // DeepSeek-V4's
}

TANDEM_FUZZ_LOAD_TOKENIZER()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const text::tokenizer& tok = fuzz::reference_tokenizer();
    fuzz::json_request body(data, size);
    if (!body.object) return 0;
    const simdjson::dom::object& obj = *body.object;
    auto opts = api::parse_generation_options(obj, api::api_kind::completion, 16);
    if (!fuzz::accepted(opts)) return 0;
    auto prompts = api::read_prompts(obj, tok, k_vocab);
    if (!fuzz::accepted(prompts)) return 0;
    FUZZ_CHECK(!prompts->empty());
    for (const auto& p : *prompts) {
        FUZZ_CHECK(!p.empty());
        for (int32_t id : p) FUZZ_CHECK(id >= 0 && id < k_vocab, "id {}", id);
    }
    return 0;
}
