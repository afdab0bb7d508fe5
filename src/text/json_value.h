// text/json_value.h — An order-preserving JSON value with Python-compatible serialization.
//
// The prompt contains JSON the client sent (tool schemas, tool-call arguments, response
// schemas), re-serialized the way DeepSeek's encoders do: Python `json.dumps(v,
// ensure_ascii=False)` separators ", " and ": ", insertion key order, non-ASCII kept, control
// characters escaped. simdjson's DOM loses number spelling and big integers, so this small
// parser keeps each number's source text and classifies it.
//
// Two number styles, because the two reference encoders differ only there:
//   python  — Python json.dumps: ints of any size verbatim, floats as repr() ("1e-05", "1e+16").
//   recipe  — deepseek-recipe (Rust serde + ryu): ints outside int64/uint64 become floats;
//             floats as ryu with an explicit '+' ("0.00001", "1e-6", "1e+16").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tandem::text {

enum class json_number_style { python, recipe };

struct json_value {
    enum class kind { null, boolean, number, string, array, object };
    kind type = kind::null;
    bool boolean = false;
    std::string text;                // string value (decoded UTF-8) or number source text
    std::vector<json_value> items;   // array elements
    std::vector<std::pair<std::string, json_value>> members;  // object, in first-seen key order

    // Declared here, defined in json_value.cpp: clang (15+, with libstdc++ 12) checks whether
    // an implicit constructor of this recursive type is usable before `members`' pair type is
    // complete, and fails; a user-declared one is not looked into (the fuzz build is clang's).
    json_value();

    bool is_object() const { return type == kind::object; }
    bool is_string() const { return type == kind::string; }
    const json_value* find(std::string_view key) const;
    json_value* find(std::string_view key);
    // Sets `key`, keeping its position if present, else appending (Python dict semantics).
    void set(std::string key, json_value value);

    static json_value make_string(std::string s);
    static json_value make_bool(bool b);
};

// Parses RFC 8259 JSON (one value, surrounding whitespace allowed). Duplicate object keys keep
// the first position and the last value, as Python's json.loads and serde_json do. Numbers
// that overflow a double (1e400) are an error, as in serde_json. Errors say where.
result<json_value> json_parse(std::string_view text);

// Serializes like json.dumps(value, ensure_ascii=False) with the given number style.
void json_dump(const json_value& v, json_number_style style, std::string* out);
std::string json_dump(const json_value& v, json_number_style style);
// The JSON string literal for `s` (with quotes), Python escaping.
void json_dump_string(std::string_view s, std::string* out);
// Formats a number's source text in the given style (exposed for tests).
std::string json_format_number(std::string_view source, json_number_style style);

}  // namespace tandem::text
