// DeepSeek's schema rules: strict normalization and schema checks, on cases whose expected
// output and messages were read from deepseek-recipe 0.2.0 (the e2e conformance test checks
// generated schemas against it live).
#include <doctest/doctest.h>

#include "text/json_value.h"
#include "text/schema_rules.h"

namespace tandem::text {
namespace {

std::string strict(const std::string& params) {
    auto v = json_parse(params);
    REQUIRE(v);
    auto out = normalize_strict_parameters(&*v);
    if (!out) return "ERR " + out.error().message();
    return json_dump(*out, json_number_style::recipe);
}

std::string check(const std::string& schema, bool object_type = true) {
    auto v = json_parse(schema);
    REQUIRE(v);
    status st = check_schema(*v, "Invalid schema for function 'f'", object_type);
    return st ? "OK" : st.message();
}

}  // namespace

TEST_CASE("schema rules: strict parameters come out in the API's model order") {
    CHECK(normalize_strict_parameters(nullptr).is_ok());
    CHECK(json_dump(*normalize_strict_parameters(nullptr), json_number_style::recipe) ==
          R"({"type": "object", "properties": {}, "additionalProperties": false, "required": []})");
    CHECK(strict(R"({"properties":{"b":{"type":"string"},"a":{"type":"string"}},"description":"x","required":["a","b"],"type":"object"})") ==
          R"({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}, "additionalProperties": false, "required": ["b", "a"], "description": "x"})");
    CHECK(strict(R"({"type":"object","properties":{"a":{"enum":["a"],"format":"email","minLength":1,"title":"T","default":"x","pattern":"^a","description":"d","type":"string"}}})") ==
          R"({"type": "object", "properties": {"a": {"type": "string", "description": "d", "pattern": "^a", "format": "email", "enum": ["a"]}}, "additionalProperties": false, "required": ["a"]})");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":2,"enum":[1],"maximum":10,"default":1,"minimum":0}}})") ==
          R"({"type": "object", "properties": {"a": {"type": "integer", "default": 1, "minimum": 0, "maximum": 10, "multipleOf": 2}}, "additionalProperties": false, "required": ["a"]})");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"number","minimum":1e10,"maximum":123456789012345678901234567890}}})") ==
          R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 10000000000.0, "maximum": 1.2345678901234568e+29}}, "additionalProperties": false, "required": ["a"]})");
    CHECK(strict(R"({"type":"object","properties":{"a":{"description":"d","type":"array","minItems":1,"items":{"type":"object","properties":{"b":{"type":"boolean","default":true}}}}}})") ==
          R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "boolean"}}, "additionalProperties": false, "required": ["b"]}, "description": "d"}}, "additionalProperties": false, "required": ["a"]})");
    CHECK(strict(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}],"type":"integer"},"b":{"$ref":"#/$defs/X","description":"d"},"c":{"type":["string","null"],"enum":["x"]}},"$defs":{"X":{"type":"string"}}})") ==
          R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/X"}, "c": {"type": ["string", "null"]}}, "additionalProperties": false, "required": ["a", "b", "c"]})");
}

TEST_CASE("schema rules: what the strict model refuses, with the API's messages") {
    const std::string p = "Invalid tool parameters schema : ";
    CHECK(strict("{}") == "ERR " + p + "one of `type`, `anyOf`, `$ref` field is required");
    CHECK(strict(R"({"type":"string"})") == "ERR The top level of the function parameters schema must be an object.");
    CHECK(strict(R"({"anyOf":[{"type":"string"}]})") == "ERR The top level of the function parameters schema must be an object.");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})") == "ERR additionalProperties should not be true");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"]})") ==
          "ERR Required properties must match all properties in the object");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a","zz"]})") == "ERR Required property 'zz' not found in object");
    CHECK(strict(R"({"type":"object","properties":{"b":{"type":"string"}},"required":["b","b"]})") == "ERR Duplicate required property 'b'");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"object"}}})") == "ERR An object with no properties is not allowed.");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"array"}}})") == "ERR " + p + "missing field `items`");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string","format":"date-time"}}})") ==
          "ERR " + p + "unknown variant `date-time`, expected one of `email`, `hostname`, `ipv4`, `ipv6`, `uuid`");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"integer","minimum":0.0}}})") ==
          "ERR " + p + "invalid type: floating point `0.0`, expected i64");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"integer","maximum":123456789012345678901234567890}}})") ==
          "ERR " + p + "invalid type: floating point `1.2345678901234568e+29`, expected i64");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"integer","minimum":10000000000000000000}}})") ==
          "ERR " + p + "invalid value: integer `10000000000000000000`, expected i64");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string","enum":[1]}}})") ==
          "ERR " + p + "invalid type: integer `1`, expected a string");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{}})") ==
          "ERR " + p + "invalid type: map, expected a boolean");
    CHECK(strict(R"({"type":"object","properties":{"a":{"type":"stringy"}}})") ==
          "ERR " + p + "unknown variant `stringy`, expected one of `object`, `string`, `number`, `integer`, `boolean`, `array`, `null`");
}

TEST_CASE("schema rules: other schemas are checked as JSON Schema, refs resolved from the root") {
    const std::string f = "Invalid schema for function 'f': ";
    CHECK(check(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/X"}},"$defs":{"X":{"type":"string"}}})") == "OK");
    CHECK(check(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/a~1b"}},"$defs":{"a/b":{}}})") == "OK");
    CHECK(check(R"({"type":"object","$defs":{"X":{"$ref":"#/nope"}}})") == "OK");  // never reached
    CHECK(check(R"({"type":"object","properties":{"a":{"type":"integer","maximum":123456789012345678901234567890}}})") == "OK");
    CHECK(check(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/X"}}})") == f + "Pointer '/$defs/X' does not exist");
    CHECK(check(R"([1])") == f + R"([1] is not of types "boolean", "object")");
    CHECK(check(R"({"type":"object","properties":{"a":5}})") == f + R"(5 is not of types "boolean", "object")");
    CHECK(check(R"({"type":"object","properties":{"a":{"type":"stringy"}}})") ==
          f + R"("stringy" is not valid under any of the schemas listed in the 'anyOf' keyword)");
    CHECK(check(R"({"type":"object","required":"a"})") == f + R"("a" is not of type "array")");
    CHECK(check(R"({"type":"object","properties":{"a":{"type":"string","minLength":-1}}})") == f + "-1 is less than the minimum of 0");
    CHECK(check(R"({})") == f + R"(schema must be a JSON Schema of 'type: "object"', got 'type: null'.)");
    CHECK(check(R"({})", false) == "OK");
}

}  // namespace tandem::text
