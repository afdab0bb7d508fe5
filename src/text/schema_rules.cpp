// text/schema_rules.cpp — The strict schema model and the schema checks (see the header).
//
// The strict model reproduces a serde deserialization: type errors read like serde's
// ("invalid type: floating point `0.5`, expected i64"), prefixed as the API prefixes them;
// the object rules that follow deserialization have messages of their own.
#include "text/schema_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <unordered_set>

namespace tandem::text {
namespace {

using kind = json_value::kind;

// ---- helpers ----------------------------------------------------------------------------

const json_value* present(const json_value& obj, std::string_view key) {
    const json_value* v = obj.is_object() ? obj.find(key) : nullptr;
    return v && v->type != kind::null ? v : nullptr;
}

bool is_integer_text(const std::string& t) { return t.find_first_of(".eE") == std::string::npos; }

enum class int_fit { i64, u64, beyond };
int_fit integer_fit(const std::string& t) {
    errno = 0;
    (void)std::strtoll(t.c_str(), nullptr, 10);
    if (errno == 0) return int_fit::i64;
    if (t[0] != '-') {
        errno = 0;
        (void)std::strtoull(t.c_str(), nullptr, 10);
        if (errno == 0) return int_fit::u64;
    }
    return int_fit::beyond;
}

// serde_json reads integers beyond 64 bits as floats.
bool reads_as_float(const json_value& v) {
    return v.type == kind::number && (!is_integer_text(v.text) || integer_fit(v.text) == int_fit::beyond);
}

// Compact JSON (serde_json::to_string), for values quoted in messages.
void compact(const json_value& v, std::string* out) {
    switch (v.type) {
        case kind::array:
            out->push_back('[');
            for (size_t i = 0; i < v.items.size(); ++i) {
                if (i) out->push_back(',');
                compact(v.items[i], out);
            }
            out->push_back(']');
            return;
        case kind::object:
            out->push_back('{');
            for (size_t i = 0; i < v.members.size(); ++i) {
                if (i) out->push_back(',');
                json_dump_string(v.members[i].first, out);
                out->push_back(':');
                compact(v.members[i].second, out);
            }
            out->push_back('}');
            return;
        default: json_dump(v, json_number_style::recipe, out);
    }
}
std::string compact(const json_value& v) {
    std::string out;
    compact(v, &out);
    return out;
}

// ---- the strict model -------------------------------------------------------------------

constexpr std::string_view k_model_prefix = "Invalid tool parameters schema : ";
constexpr std::string_view k_node_kinds = "one of `type`, `anyOf`, `$ref` field is required";

status model_error(const std::string& what) {
    return make_error(error_code::invalid_argument, std::string(k_model_prefix) + what);
}
status rule_error(const std::string& what) { return make_error(error_code::invalid_argument, what); }

// serde's words for a value it did not expect.
std::string unexpected(const json_value& v) {
    switch (v.type) {
        case kind::null: return "null";
        case kind::boolean: return fmt::format("boolean `{}`", v.boolean ? "true" : "false");
        case kind::number:
            if (reads_as_float(v)) return fmt::format("floating point `{}`", json_format_number(v.text, json_number_style::recipe));
            return fmt::format("integer `{}`", v.text);
        case kind::string: return "string " + compact(v);
        case kind::array: return "sequence";
        case kind::object: return "map";
    }
    return "value";
}

status expect(bool ok, const json_value& v, std::string_view what) {
    return ok ? status::ok() : model_error(fmt::format("invalid type: {}, expected {}", unexpected(v), what));
}

// A keyword value of a given shape, as serde checks it.
enum class field_shape { string, i64, number, strings };
status check_shape(const json_value& v, field_shape shape) {
    switch (shape) {
        case field_shape::string: return expect(v.is_string(), v, "a string");
        case field_shape::number: return expect(v.type == kind::number, v, "a JSON number");
        case field_shape::i64:
            if (v.type == kind::number && !reads_as_float(v) && integer_fit(v.text) == int_fit::u64) {
                return model_error(fmt::format("invalid value: integer `{}`, expected i64", v.text));
            }
            return expect(v.type == kind::number && !reads_as_float(v), v, "i64");
        case field_shape::strings:
            TANDEM_RETURN_IF_ERROR(expect(v.type == kind::array, v, "a sequence"));
            for (const json_value& s : v.items) TANDEM_RETURN_IF_ERROR(expect(s.is_string(), s, "a string"));
            return status::ok();
    }
    return status::ok();
}

// Copies an optional keyword of a given shape into `out`.
status copy_field(const json_value& in, std::string_view key, field_shape shape, json_value* out) {
    const json_value* v = present(in, key);
    if (v == nullptr) return status::ok();
    TANDEM_RETURN_IF_ERROR(check_shape(*v, shape));
    out->set(std::string(key), *v);
    return status::ok();
}

constexpr const char* k_scalar_types[] = {"string", "number", "integer", "boolean", "null"};
constexpr const char* k_numeric_keywords[] = {"default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                              "multipleOf"};

result<json_value> strict_node(const json_value& in, bool top);

// serde names the anyOf field in errors from inside it ("field `anyOf`: invalid type: ...").
status in_any_of(const status& st) {
    if (st.message().rfind(k_model_prefix, 0) != 0) return st;
    return model_error("field `anyOf`: " + st.message().substr(k_model_prefix.size()));
}

// One keyword of a node of type `t`, read as serde reads it (checked, nested schemas normalized)
// into `got`; keywords the model lacks are skipped.
status read_keyword(const std::string& t, const std::string& key, const json_value& v, json_value* got) {
    auto keep = [&](field_shape shape) -> status {
        TANDEM_RETURN_IF_ERROR(check_shape(v, shape));
        got->set(key, v);
        return status::ok();
    };
    if (key == "description") return keep(field_shape::string);
    if (t == "object") {
        if (key == "properties") {
            TANDEM_RETURN_IF_ERROR(expect(v.is_object(), v, "a map"));
            json_value props;
            props.type = kind::object;
            for (const auto& [name, sub] : v.members) {
                auto node = strict_node(sub, false);
                if (!node) return node.error();
                props.set(name, std::move(*node));
            }
            got->set(key, std::move(props));
        } else if (key == "additionalProperties") {
            TANDEM_RETURN_IF_ERROR(expect(v.type == kind::boolean, v, "a boolean"));
            got->set(key, v);
        } else if (key == "required") {
            return keep(field_shape::strings);
        }
        return status::ok();
    }
    if (t == "string") {
        if (key == "pattern") return keep(field_shape::string);
        if (key == "enum") return keep(field_shape::strings);
        if (key == "format") {
            TANDEM_RETURN_IF_ERROR(expect(v.is_string(), v, "a string"));
            static const std::set<std::string> formats = {"email", "hostname", "ipv4", "ipv6", "uuid"};
            if (!formats.count(v.text)) {
                return model_error(fmt::format("unknown variant `{}`, expected one of `email`, `hostname`, `ipv4`, "
                                               "`ipv6`, `uuid`", v.text));
            }
            got->set(key, v);
        }
        return status::ok();
    }
    if (t == "integer" || t == "number") {
        for (const char* k : k_numeric_keywords) {
            if (key == k) return keep(t == "integer" ? field_shape::i64 : field_shape::number);
        }
        return status::ok();
    }
    if (t == "array" && key == "items") {
        auto node = strict_node(v, false);
        if (!node) return node.error();
        got->set(key, std::move(*node));
    }
    return status::ok();
}

// The object rules, checked once the node deserialized; `got` holds its keywords.
status strict_object(const json_value& got, bool top, json_value* out) {
    json_value props;
    props.type = kind::object;
    if (const json_value* p = got.find("properties")) props = *p;
    const json_value* extra = got.find("additionalProperties");
    const json_value* required = got.find("required");
    if (extra && extra->boolean) return rule_error("additionalProperties should not be true");
    if (!top && props.members.empty()) return rule_error("An object with no properties is not allowed.");
    json_value names;  // always every property, in property order (as the API writes it)
    names.type = kind::array;
    for (const auto& member : props.members) names.items.push_back(json_value::make_string(member.first));
    if (required) {
        std::set<std::string> seen;
        for (const json_value& r : required->items) {
            if (!seen.insert(r.text).second) return rule_error(fmt::format("Duplicate required property '{}'", r.text));
            if (props.find(r.text) == nullptr) return rule_error(fmt::format("Required property '{}' not found in object", r.text));
        }
        if (seen.size() != props.members.size()) {
            return rule_error("Required properties must match all properties in the object");
        }
    }
    out->set("properties", std::move(props));
    out->set("additionalProperties", json_value::make_bool(false));
    out->set("required", std::move(names));
    if (const json_value* d = got.find("description")) out->set("description", *d);
    return status::ok();
}

status strict_typed(const json_value& in, const json_value& type, bool top, json_value* out) {
    out->set("type", type);
    if (type.type == kind::array) {
        for (const json_value& t : type.items) {
            const bool known = t.is_string() && std::find(std::begin(k_scalar_types), std::end(k_scalar_types), t.text) !=
                                                    std::end(k_scalar_types);
            if (!known) {
                return model_error(fmt::format("field `type`: unknown variant `{}`, expected one of `string`, `number`, "
                                               "`integer`, `boolean`, `null`", t.is_string() ? t.text : compact(t)));
            }
        }
        return copy_field(in, "description", field_shape::string, out);
    }
    if (!type.is_string()) return model_error(std::string(k_node_kinds));
    const std::string& t = type.text;
    static const std::set<std::string> types = {"object", "string", "number", "integer", "boolean", "array", "null"};
    if (!types.count(t)) {
        return model_error(fmt::format("unknown variant `{}`, expected one of `object`, `string`, `number`, `integer`, "
                                       "`boolean`, `array`, `null`", t));
    }
    // serde reads the keywords in the body's order, so the first bad one is the one reported.
    json_value got;
    got.type = kind::object;
    for (const auto& [key, v] : in.members) {
        if (v.type != kind::null) TANDEM_RETURN_IF_ERROR(read_keyword(t, key, v, &got));
    }
    if (t == "object") return strict_object(got, top, out);
    if (t == "array" && got.find("items") == nullptr) return model_error("missing field `items`");
    // Written in the model's order.
    static const char* const order[] = {"items", "description", "pattern", "format", "enum", "default", "minimum",
                                        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
    for (const char* key : order) {
        if (const json_value* v = got.find(key)) out->set(key, *v);
    }
    return status::ok();
}

result<json_value> strict_node(const json_value& in, bool top) {
    json_value out;
    out.type = kind::object;
    if (const json_value* type = present(in, "type")) {
        TANDEM_RETURN_IF_ERROR(strict_typed(in, *type, top, &out));
    } else if (const json_value* any = present(in, "anyOf")) {
        TANDEM_RETURN_IF_ERROR(expect(any->type == kind::array, *any, "a sequence"));
        json_value items;
        items.type = kind::array;
        for (const json_value& sub : any->items) {
            // The model's anyOf holds typed schemas of one type (no type lists, anyOf or $ref).
            const json_value* type = present(sub, "type");
            if (type == nullptr) return model_error("field `anyOf`: missing field `type`");
            if (type->type == kind::array) {
                return model_error("field `anyOf`: invalid type: sequence, expected variant identifier");
            }
            auto node = strict_node(sub, false);
            if (!node) return in_any_of(node.error());
            items.items.push_back(std::move(*node));
        }
        out.set("anyOf", std::move(items));
        TANDEM_RETURN_IF_ERROR(copy_field(in, "description", field_shape::string, &out));
    } else if (const json_value* ref = present(in, "$ref")) {
        if (!ref->is_string()) return model_error(fmt::format("field `$ref`: invalid type: {}, expected a string", unexpected(*ref)));
        out.set("$ref", *ref);
    } else {
        return model_error(std::string(k_node_kinds));
    }
    return out;
}


// ---- JSON Schema checks -----------------------------------------------------------------
//
// The meta-schema's shape rules for the common keywords, then $ref resolution from the root
// (a $ref inside an unreferenced $defs entry is never reached, as in the API's validator).

struct schema_walk {
    const json_value& root;
    std::unordered_set<std::string> followed;  // pointers whose targets were walked
};

status schema_error(const std::string& what) { return make_error(error_code::invalid_argument, what); }

status must_be(bool ok, const json_value& v, std::string_view type) {
    return ok ? status::ok() : schema_error(fmt::format("{} is not of type \"{}\"", compact(v), type));
}

bool is_schema(const json_value& v) { return v.is_object() || v.type == kind::boolean; }

status check_meta(const json_value& s) {
    if (!is_schema(s)) return schema_error(fmt::format("{} is not of types \"boolean\", \"object\"", compact(s)));
    if (!s.is_object()) return status::ok();
    for (const auto& [key, v] : s.members) {
        if (key == "properties" || key == "patternProperties" || key == "$defs" || key == "definitions" ||
            key == "dependentSchemas") {
            TANDEM_RETURN_IF_ERROR(must_be(v.is_object(), v, "object"));
            for (const auto& member : v.members) TANDEM_RETURN_IF_ERROR(check_meta(member.second));
        } else if (key == "items" || key == "additionalProperties" || key == "not" || key == "contains" ||
                   key == "propertyNames" || key == "if" || key == "then" || key == "else" ||
                   key == "unevaluatedItems" || key == "unevaluatedProperties") {
            TANDEM_RETURN_IF_ERROR(check_meta(v));
        } else if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "prefixItems") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::array, v, "array"));
            if (v.items.empty()) return schema_error("[] has less than 1 item");
            for (const json_value& sub : v.items) TANDEM_RETURN_IF_ERROR(check_meta(sub));
        } else if (key == "type") {
            auto simple = [](const json_value& t) {
                static const std::set<std::string> names = {"array", "boolean", "integer", "null", "number", "object", "string"};
                return t.is_string() && names.count(t.text) > 0;
            };
            bool ok = simple(v) || (v.type == kind::array && !v.items.empty() &&
                                    std::all_of(v.items.begin(), v.items.end(), simple));
            if (!ok) return schema_error(fmt::format("{} is not valid under any of the schemas listed in the 'anyOf' keyword", compact(v)));
            std::set<std::string> names;
            for (const json_value& t : v.items) {
                if (!names.insert(t.text).second) return schema_error(compact(v) + " has non-unique elements");
            }
        } else if (key == "required") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::array, v, "array"));
            std::set<std::string> seen;
            for (const json_value& r : v.items) {
                TANDEM_RETURN_IF_ERROR(must_be(r.is_string(), r, "string"));
                if (!seen.insert(r.text).second) return schema_error(compact(v) + " has non-unique elements");
            }
        } else if (key == "enum") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::array, v, "array"));
        } else if (key == "minLength" || key == "maxLength" || key == "minItems" || key == "maxItems" ||
                   key == "minProperties" || key == "maxProperties" || key == "minContains" || key == "maxContains") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::number && is_integer_text(v.text), v, "integer"));
            if (v.text[0] == '-') return schema_error(fmt::format("{} is less than the minimum of 0", v.text));
        } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum" ||
                   key == "multipleOf") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::number, v, "number"));
            if (key == "multipleOf" && std::strtod(v.text.c_str(), nullptr) <= 0) {
                return schema_error(fmt::format("{} is less than or equal to the minimum of 0", v.text));
            }
        } else if (key == "title" || key == "description" || key == "pattern" || key == "format" || key == "$ref" ||
                   key == "$id" || key == "$schema" || key == "$anchor" || key == "$comment") {
            TANDEM_RETURN_IF_ERROR(must_be(v.is_string(), v, "string"));
        } else if (key == "uniqueItems" || key == "readOnly" || key == "writeOnly" || key == "deprecated") {
            TANDEM_RETURN_IF_ERROR(must_be(v.type == kind::boolean, v, "boolean"));
        }
    }
    return status::ok();
}

// RFC 6901 over the document, after the fragment's percent-decoding.
const json_value* resolve_pointer(const json_value& root, std::string_view pointer) {
    std::string decoded;
    for (size_t i = 0; i < pointer.size(); ++i) {
        if (pointer[i] == '%' && i + 2 < pointer.size() && std::isxdigit(static_cast<unsigned char>(pointer[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(pointer[i + 2]))) {
            decoded.push_back(static_cast<char>(std::stoi(std::string(pointer.substr(i + 1, 2)), nullptr, 16)));
            i += 2;
        } else {
            decoded.push_back(pointer[i]);
        }
    }
    if (decoded.empty()) return &root;
    if (decoded[0] != '/') return nullptr;
    const json_value* at = &root;
    size_t start = 1;
    while (at != nullptr) {
        const size_t end = decoded.find('/', start);
        std::string token = decoded.substr(start, end == std::string::npos ? std::string::npos : end - start);
        for (size_t p = 0; (p = token.find('~', p)) != std::string::npos; ++p) {
            if (p + 1 < token.size() && (token[p + 1] == '0' || token[p + 1] == '1')) token.replace(p, 2, token[p + 1] == '0' ? "~" : "/");
        }
        if (at->is_object()) {
            at = at->find(token);
        } else if (at->type == kind::array && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoull(token) < at->items.size()) {
            at = &at->items[std::stoull(token)];
        } else {
            at = nullptr;
        }
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return at;
}

status check_refs(schema_walk& walk, const json_value& s) {
    if (!s.is_object()) return status::ok();
    for (const auto& [key, v] : s.members) {
        if (key == "$ref" && v.is_string()) {
            if (v.text.empty() || v.text[0] != '#') {
                return schema_error(fmt::format("Resource '{0}' is not present in a registry and retrieving it failed: "
                                                "Retrieval is disabled, cannot fetch {0}", v.text));
            }
            const std::string pointer = v.text.substr(1);
            const json_value* target = resolve_pointer(walk.root, pointer);
            if (target == nullptr) return schema_error(fmt::format("Pointer '{}' does not exist", pointer));
            if (walk.followed.insert(pointer).second) TANDEM_RETURN_IF_ERROR(check_refs(walk, *target));
        } else if (key == "properties" || key == "patternProperties" || key == "dependentSchemas") {
            for (const auto& member : v.members) TANDEM_RETURN_IF_ERROR(check_refs(walk, member.second));
        } else if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "prefixItems") {
            for (const json_value& sub : v.items) TANDEM_RETURN_IF_ERROR(check_refs(walk, sub));
        } else if (key == "items" || key == "additionalProperties" || key == "not" || key == "contains" ||
                   key == "propertyNames" || key == "if" || key == "then" || key == "else" ||
                   key == "unevaluatedItems" || key == "unevaluatedProperties") {
            TANDEM_RETURN_IF_ERROR(check_refs(walk, v));
        }
    }
    return status::ok();
}

}  // namespace

status check_schema(const json_value& schema, const std::string& context, bool require_object_type) {
    status st = check_meta(schema);
    if (st) {
        schema_walk walk{schema, {}};
        st = check_refs(walk, schema);
    }
    if (st && require_object_type) {
        const json_value* type = present(schema, "type");
        if (type == nullptr || !type->is_string() || type->text != "object") {
            st = schema_error(fmt::format("schema must be a JSON Schema of 'type: \"object\"', got 'type: {}'.",
                                          type ? compact(*type) : "null"));
        }
    }
    return st ? st : make_error(error_code::invalid_argument, context + ": " + st.message());
}

result<json_value> normalize_strict_parameters(const json_value* params) {
    json_value empty;  // no parameters: an object without properties
    empty.type = kind::object;
    empty.set("type", json_value::make_string("object"));
    auto node = strict_node(params && params->type != kind::null ? *params : empty, true);
    if (!node) return node.error();
    const json_value* type = node->find("type");
    if (type == nullptr || !type->is_string() || type->text != "object") {
        return rule_error("The top level of the function parameters schema must be an object.");
    }
    return node;
}

}  // namespace tandem::text
