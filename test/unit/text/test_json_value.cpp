// The Python-compatible JSON writer: number spellings against Python json.dumps and against
// deepseek-recipe (tools/text/gen_json_golden.py), and string escaping / key order.
#include <simdjson.h>

#include <doctest/doctest.h>

#include "text/json_value.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

TEST_CASE("json: number spellings match Python and deepseek-recipe") {
    simdjson::dom::parser parser;
    simdjson::dom::element root = parser.load(testing::source_path("test/golden/text/json_numbers.json"));
    int64_t checked = 0;
    for (simdjson::dom::element c : root["cases"].get_array()) {
        const std::string_view source = c["source"];
        CAPTURE(source);
        CHECK(json_format_number(source, json_number_style::python) == std::string_view(c["python"]));
        std::string_view recipe;
        if (!c["recipe"].get(recipe)) CHECK(json_format_number(source, json_number_style::recipe) == recipe);
        ++checked;
    }
    CHECK(checked > 700);
}

TEST_CASE("json: dump keeps key order, escapes like Python, keeps non-ASCII") {
    auto v = json_parse(R"({"b": 1, "a": [true, null, "x\u0001\"\\/\n\u00e9\ud83d\ude00\u2028"], "b": 2, "": {}})");
    REQUIRE(v.is_ok());
    CHECK(json_dump(*v, json_number_style::python) ==
          "{\"b\": 2, \"a\": [true, null, \"x\\u0001\\\"\\\\/\\né😀\u2028\"], \"\": {}}");
}

TEST_CASE("json: strings must be valid UTF-8; the error names the problem and the byte") {
    CHECK(json_parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").is_ok());  // é and an emoji
    for (std::string_view bad : {std::string_view("{\"a\": \"\xFF\"}"),   // never valid
                                 std::string_view("{\"a\": \"\xC3(\"}"),   // bad continuation
                                 std::string_view("{\"a\": \"\xC0\xAF\"}"),  // overlong '/'
                                 std::string_view("{\"a\": \"\xED\xA0\x80\"}"),  // surrogate
                                 std::string_view("{\"\x80\": 1}"),  // in a key
                                 std::string_view("\"\xE2\x82"),   // cut by the end
                                 std::string_view("{\"a\": \"ok\xE2\x82\"}")}) {  // cut by '"'
        CAPTURE(bad);
        auto r = json_parse(bad);
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.error().message().find("invalid UTF-8") != std::string::npos);
        CHECK(r.error().message().find("byte") != std::string::npos);
    }
}

TEST_CASE("json: parse errors say where; overflow is an error") {
    auto bad = json_parse("{\"a\": [1, 2,]}");
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("byte") != std::string::npos);
    CHECK_FALSE(json_parse("1e400").is_ok());
    CHECK_FALSE(json_parse("01").is_ok());
    CHECK_FALSE(json_parse("\"a\tb\"").is_ok());
    CHECK(json_parse(" [] ").is_ok());
}

}  // namespace
}  // namespace tandem::text
