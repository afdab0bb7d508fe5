// The request-body readers the handlers and the fuzz harnesses share (api/request_bodies.h).
#include <doctest/doctest.h>

#include "api/request_bodies.h"

using namespace tandem;
using namespace tandem::api;

namespace {

result<generate_body> read_generate(const std::string& json) {
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(json).value();
    return read_generate_body(doc.get_object().value(), 1000);
}

}  // namespace

TEST_CASE("generate body: stream is read from the body with or without sampling_params") {
    // Regression: without sampling_params the handler parsed "{}" with the body's own parser,
    // which overwrote the document and made "stream": true read as false.
    auto plain = read_generate(R"({"input_ids":[1,2],"stream":true})");
    REQUIRE(plain);
    CHECK(plain->stream);
    CHECK(plain->input_ids == std::vector<int32_t>{1, 2});
    CHECK(plain->opts.sampling.max_tokens == 16);
    auto with = read_generate(R"({"input_ids":[3],"sampling_params":{"max_tokens":4},"stream":true})");
    REQUIRE(with);
    CHECK(with->stream);
    CHECK(with->opts.sampling.max_tokens == 4);
    auto off = read_generate(R"({"input_ids":[3]})");
    REQUIRE(off);
    CHECK_FALSE(off->stream);
}

TEST_CASE("generate body: refusals name the field") {
    auto not_object = read_generate(R"({"input_ids":[1],"sampling_params":[1]})");
    REQUIRE_FALSE(not_object);
    CHECK(not_object.error().code() == error_code::invalid_argument);
    CHECK(not_object.error().message().find("sampling_params") != std::string::npos);
    auto empty = read_generate(R"({"input_ids":[]})");
    REQUIRE_FALSE(empty);
    CHECK(empty.error().message().find("must not be empty") != std::string::npos);
    auto out_of_vocab = read_generate(R"({"input_ids":[1000]})");
    REQUIRE_FALSE(out_of_vocab);
    CHECK(out_of_vocab.error().message().find("input_ids[0]") != std::string::npos);
}
