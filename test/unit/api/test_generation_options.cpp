#include <doctest/doctest.h>

#include "api/generation_options.h"

using namespace tandem;
using namespace tandem::api;

namespace {

result<generation_options> parse(const std::string& json, api_kind kind = api_kind::chat) {
    static simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(json).value();
    return parse_generation_options(doc.get_object().value(), kind, 100);
}

}  // namespace

TEST_CASE("generation options: defaults and accepted fields") {
    auto d = parse("{}");
    REQUIRE(d);
    CHECK(d->sampling.max_tokens == 100);
    CHECK_FALSE(d->max_tokens_given);
    CHECK(d->sampling.logprobs == -1);
    auto o = parse(R"({"model":"m","temperature":0,"top_p":0.5,"top_k":5,"min_p":0.1,
        "seed":42,"max_tokens":7,"n":3,"stream":true,"stream_options":{"include_usage":true},
        "stop":["a","bb"],"stop_token_ids":[5],"logprobs":true,"top_logprobs":3,
        "presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1})");
    REQUIRE(o);
    CHECK(o->model == "m");
    CHECK(o->sampling.temperature == 0.0);
    CHECK(o->sampling.top_k == 5);
    CHECK(o->sampling.seed == 42u);
    CHECK(o->sampling.max_tokens == 7);
    CHECK(o->max_tokens_given);
    CHECK(o->n == 3);
    CHECK(o->stream);
    CHECK(o->include_usage);
    CHECK(o->stop == std::vector<std::string>{"a", "bb"});
    CHECK(o->sampling.stop_token_ids == std::vector<int32_t>{5});
    CHECK(o->sampling.logprobs == 3);
    CHECK(parse(R"({"max_completion_tokens":9})")->sampling.max_tokens == 9);
    CHECK(parse(R"({"stop":"x"})")->stop == std::vector<std::string>{"x"});
}

TEST_CASE("generation options: completions take logprobs as a count and echo") {
    auto o = parse(R"({"logprobs":2,"echo":true})", api_kind::completion);
    REQUIRE(o);
    CHECK(o->sampling.logprobs == 2);
    CHECK(o->echo);
    CHECK(o->sampling.prompt_logprobs);
}

TEST_CASE("generation options: bad values are errors naming the field") {
    struct bad_case { const char* json; const char* field; };
    bad_case cases[] = {
        {R"({"temperature":3})", "temperature"},
        {R"({"temperature":"hot"})", "temperature"},
        {R"({"top_p":0})", "top_p"},
        {R"({"max_tokens":0})", "max_tokens"},
        {R"({"max_tokens":1.5})", "max_tokens"},
        {R"({"n":0})", "n"},
        {R"({"stream":"yes"})", "stream"},
        {R"({"stop":[1]})", "stop[0]"},
        {R"({"stop":""})", "stop"},
        {R"({"stop_token_ids":[-1]})", "stop_token_ids[0]"},
        {R"({"top_logprobs":2})", "top_logprobs"},
        {R"({"logprobs":true,"top_logprobs":50})", "top_logprobs"},
        {R"({"presence_penalty":5})", "presence_penalty"},
        {R"({"model":5})", "model"},
        {R"({"stream_options":true})", "stream_options"},
    };
    for (const auto& c : cases) {
        auto r = parse(c.json);
        REQUIRE_MESSAGE(!r, c.json);
        CHECK_MESSAGE(r.error().message().find(c.field) != std::string::npos, c.json);
        CHECK_MESSAGE(r.error().param() == c.field, c.json);  // OpenAI's `param`
        CHECK(r.error().code() == error_code::invalid_argument);
    }
}
