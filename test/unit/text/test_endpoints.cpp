// The text endpoint bodies: shapes, round trips and errors that name the field.
#include <doctest/doctest.h>

#include "text/endpoints.h"
#include "text/json_value.h"
#include "text/text.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

TEST_CASE("endpoints: tokenize, detokenize, render") {
    auto tok = testing::reference_tokenizer();
    auto t = tokenize_endpoint(R"({"prompt": "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"})", *tok);
    REQUIRE(t.is_ok());
    CHECK(*t == R"({"tokens":[128803,30594,128804,128821,36101,128822,7624,1],"count":8})");
    auto d = detokenize_endpoint(R"({"tokens":[128803,30594,128804]})", *tok);
    REQUIRE(d.is_ok());
    CHECK(*d == R"({"prompt":"<｜User｜>你好<｜Assistant｜>"})");
    const char* chat = R"({"messages":[{"role":"user","content":"hello"}],"thinking":{"type":"disabled"}})";
    auto r = render_endpoint(chat, *tok);
    REQUIRE(r.is_ok());
    CHECK(*r == R"({"prompt":"<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>","tokens":[0,128803,33310,128804,128822]})");
    auto tc = tokenize_endpoint(chat, *tok);
    REQUIRE(tc.is_ok());
    CHECK(*tc == R"({"tokens":[0,128803,33310,128804,128822],"count":5})");
}

TEST_CASE("endpoints: errors name the field") {
    auto tok = testing::reference_tokenizer();
    CHECK(detokenize_endpoint(R"({"tokens":[1, 999999]})", *tok).error().message().find("tokens[1]") != std::string::npos);
    CHECK(detokenize_endpoint(R"({"tokens":[1.5]})", *tok).error().message().find("tokens[0]") != std::string::npos);
    CHECK(tokenize_endpoint(R"({"prompt": 3})", *tok).error().message().find("prompt") != std::string::npos);
    CHECK(tokenize_endpoint(R"({})", *tok).error().code() == error_code::invalid_argument);
    CHECK_FALSE(render_endpoint(R"({"messages":[{"role":"user"}],"reasoning_effort":"bad"})", *tok).is_ok());
}

}  // namespace
}  // namespace tandem::text
