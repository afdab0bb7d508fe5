// Fuzz target: a POST /generate body (native API), read as handle_generate reads it (JSON object
// → input_ids, sampling_params, stream). Properties: no crash; every refusal a client error
// (4xx); ids inside the vocabulary; "stream" read from the body itself (a regression: it was
// read after the parser had been reused for the default sampling_params).
#include "api/request_bodies.h"
#include "fuzz_support.h"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr int32_t vocab = 129280;
    fuzz::json_request request(data, size);
    if (!request.object) return 0;
    const simdjson::dom::object& obj = *request.object;
    auto body = api::read_generate_body(obj, vocab);
    if (!fuzz::accepted(body)) return 0;
    FUZZ_CHECK(!body->input_ids.empty());
    for (int32_t id : body->input_ids) FUZZ_CHECK(id >= 0 && id < vocab, "id {}", id);
    simdjson::dom::element el;
    bool stream = !obj["stream"].get(el) && el.is_bool() && el.get_bool().value();
    FUZZ_CHECK(body->stream == stream);
    return 0;
}
