// text/json_value.cpp — Order-preserving JSON parse and Python-style dump.
#include "text/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "text/utf8.h"

namespace tandem::text {

json_value::json_value() = default;


const json_value* json_value::find(std::string_view key) const {
    for (const auto& [k, v] : members) {
        if (k == key) return &v;
    }
    return nullptr;
}

json_value* json_value::find(std::string_view key) {
    for (auto& [k, v] : members) {
        if (k == key) return &v;
    }
    return nullptr;
}

void json_value::set(std::string key, json_value value) {
    if (json_value* existing = find(key)) {
        *existing = std::move(value);
        return;
    }
    members.emplace_back(std::move(key), std::move(value));
}

json_value json_value::make_string(std::string s) {
    json_value v;
    v.type = kind::string;
    v.text = std::move(s);
    return v;
}

json_value json_value::make_bool(bool b) {
    json_value v;
    v.type = kind::boolean;
    v.boolean = b;
    return v;
}

// ---- parser ------------------------------------------------------------------------------

namespace {

constexpr int max_depth = 512;

class parser {
public:
    explicit parser(std::string_view s) : s_(s) {}

    result<json_value> parse_document() {
        json_value v;
        skip_ws();
        TANDEM_RETURN_IF_ERROR(parse_value(&v, 0));
        skip_ws();
        if (pos_ != s_.size()) return error("unexpected text after the JSON value");
        return v;
    }

private:
    status error(const std::string& what) const {
        return make_error(error_code::invalid_argument,
                          "invalid JSON at byte " + std::to_string(pos_) + ": " + what);
    }
    void skip_ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                    s_[pos_] == '\r')) {
            ++pos_;
        }
    }
    bool consume(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return false;
        pos_ += word.size();
        return true;
    }

    status parse_value(json_value* v, int depth) {
        if (depth > max_depth) return error("nesting too deep");
        if (pos_ >= s_.size()) return error("unexpected end");
        const char c = s_[pos_];
        if (c == '{') return parse_object(v, depth);
        if (c == '[') return parse_array(v, depth);
        if (c == '"') {
            v->type = json_value::kind::string;
            return parse_string(&v->text);
        }
        if (consume("true")) return *v = json_value::make_bool(true), status::ok();
        if (consume("false")) return *v = json_value::make_bool(false), status::ok();
        if (consume("null")) return v->type = json_value::kind::null, status::ok();
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(v);
        return error("unexpected character");
    }

    status parse_object(json_value* v, int depth) {
        v->type = json_value::kind::object;
        ++pos_;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, status::ok();
        for (;;) {
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a key string");
            std::string key;
            TANDEM_RETURN_IF_ERROR(parse_string(&key));
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
            ++pos_;
            skip_ws();
            json_value member;
            TANDEM_RETURN_IF_ERROR(parse_value(&member, depth + 1));
            v->set(std::move(key), std::move(member));
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, status::ok();
            return error("expected ',' or '}'");
        }
    }

    status parse_array(json_value* v, int depth) {
        v->type = json_value::kind::array;
        ++pos_;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, status::ok();
        for (;;) {
            skip_ws();
            json_value item;
            TANDEM_RETURN_IF_ERROR(parse_value(&item, depth + 1));
            v->items.push_back(std::move(item));
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, status::ok();
            return error("expected ',' or ']'");
        }
    }

    status parse_number(json_value* v) {
        const size_t begin = pos_;
        auto digits = [&] {
            size_t d = pos_;
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
            return pos_ - d;
        };
        if (s_[pos_] == '-') ++pos_;
        if (pos_ < s_.size() && s_[pos_] == '0') {
            ++pos_;
        } else if (digits() == 0) {
            return error("bad number");
        }
        if (pos_ < s_.size() && s_[pos_] == '.') {
            ++pos_;
            if (digits() == 0) return error("bad fraction");
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
            if (digits() == 0) return error("bad exponent");
        }
        v->type = json_value::kind::number;
        v->text = std::string(s_.substr(begin, pos_ - begin));
        const bool is_float = v->text.find_first_of(".eE") != std::string::npos;
        if (is_float && !std::isfinite(std::strtod(v->text.c_str(), nullptr))) {
            pos_ = begin;
            return error("number out of range");
        }
        return status::ok();
    }

    status parse_hex4(uint32_t* out) {
        if (pos_ + 4 > s_.size()) return error("short \\u escape");
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) {
            const char h = s_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= h - '0';
            else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
            else return error("bad \\u escape");
        }
        *out = cp;
        return status::ok();
    }

    static void append_utf8(uint32_t cp, std::string* out) {
        if (cp < 0x80) {
            out->push_back(static_cast<char>(cp));
        } else if (cp < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
            out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else {
            out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
    }

    status parse_escape(std::string* out) {
        if (pos_ >= s_.size()) return error("unterminated escape");
        const char e = s_[pos_++];
        switch (e) {
            case '"': out->push_back('"'); return status::ok();
            case '\\': out->push_back('\\'); return status::ok();
            case '/': out->push_back('/'); return status::ok();
            case 'b': out->push_back('\b'); return status::ok();
            case 'f': out->push_back('\f'); return status::ok();
            case 'n': out->push_back('\n'); return status::ok();
            case 'r': out->push_back('\r'); return status::ok();
            case 't': out->push_back('\t'); return status::ok();
            case 'u': break;
            default: return error("bad escape");
        }
        uint32_t cp = 0;
        TANDEM_RETURN_IF_ERROR(parse_hex4(&cp));
        if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            pos_ += 2;
            uint32_t lo = 0;
            TANDEM_RETURN_IF_ERROR(parse_hex4(&lo));
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
                pos_ = save;
            }
        }
        // A lone surrogate cannot be UTF-8; it becomes U+FFFD (what a Rust String would hold).
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        append_utf8(cp, out);
        return status::ok();
    }

    status parse_string(std::string* out) {
        ++pos_;  // opening quote
        out->clear();
        for (;;) {
            if (pos_ >= s_.size()) return error("unterminated string");
            const char c = s_[pos_];
            if (c == '"') return ++pos_, status::ok();
            if (static_cast<unsigned char>(c) < 0x20) return error("control character in string");
            if (c == '\\') {
                ++pos_;
                TANDEM_RETURN_IF_ERROR(parse_escape(out));
                continue;
            }
            const size_t run = pos_;
            while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\\' &&
                   static_cast<unsigned char>(s_[pos_]) >= 0x20) {
                if (static_cast<unsigned char>(s_[pos_]) < 0x80) {
                    ++pos_;
                    continue;
                }
                // JSON text is UTF-8 (RFC 8259 §8.1); a string we let through with broken bytes
                // would reach the tokenizer, the logs and other clients' JSON.
                int subpart = 0;
                bool truncated = false;
                const int n = utf8_sequence_length(s_, static_cast<int64_t>(pos_), &subpart,
                                                   &truncated);
                if (n == 0) return error("invalid UTF-8 in a string");
                pos_ += static_cast<size_t>(n);
            }
            out->append(s_.substr(run, pos_ - run));
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
};

}  // namespace

result<json_value> json_parse(std::string_view text) { return parser(text).parse_document(); }

// ---- numbers -----------------------------------------------------------------------------

namespace {

// Shortest round-trip digits of `d` (no sign) and the decimal exponent of the first digit.
void shortest_digits(double d, std::string* digits, int* exp10) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
    std::string_view s(buf, res.ptr - buf);  // "d.ddde+XX" or "de-XX"
    const size_t e = s.find('e');
    digits->clear();
    for (char c : s.substr(0, e)) {
        if (c != '.') digits->push_back(c);
    }
    while (digits->size() > 1 && digits->back() == '0') digits->pop_back();
    *exp10 = std::atoi(std::string(s.substr(e + 1)).c_str());
}

std::string format_float(double d, json_number_style style) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    std::string digits;
    int exp10 = 0;
    shortest_digits(d, &digits, &exp10);
    std::string out = std::signbit(d) ? "-" : "";
    const int n = static_cast<int>(digits.size());
    const int low = style == json_number_style::python ? -4 : -5;
    if (exp10 >= low && exp10 < 16) {
        if (exp10 < 0) {
            out.append("0.").append(-exp10 - 1, '0').append(digits);
        } else if (n <= exp10 + 1) {
            out.append(digits).append(exp10 + 1 - n, '0').append(".0");
        } else {
            out.append(digits, 0, exp10 + 1).append(".").append(digits, exp10 + 1);
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (n > 1) out.append(".").append(digits, 1);
    out += exp10 < 0 ? "e-" : "e+";
    std::string e = std::to_string(exp10 < 0 ? -exp10 : exp10);
    if (style == json_number_style::python && e.size() < 2) e.insert(e.begin(), '0');
    return out + e;
}

bool fits_int64_or_uint64(std::string_view s) {
    if (!s.empty() && s[0] == '-') {
        int64_t v = 0;
        auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        return r.ec == std::errc() && r.ptr == s.data() + s.size();
    }
    uint64_t v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string json_format_number(std::string_view source, json_number_style style) {
    const bool is_float = source.find_first_of(".eE") != std::string_view::npos;
    if (!is_float) {
        // Python's int("-0") is 0; serde reads "-0" as the float -0.0.
        if (source == "-0") return style == json_number_style::python ? "0" : "-0.0";
        if (style == json_number_style::python || fits_int64_or_uint64(source)) {
            return std::string(source);
        }
    }
    return format_float(std::strtod(std::string(source).c_str(), nullptr), style);
}

// ---- dump --------------------------------------------------------------------------------

void json_dump_string(std::string_view s, std::string* out) {
    static const char hex[] = "0123456789abcdef";
    out->push_back('"');
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out->append("\\\""); break;
            case '\\': out->append("\\\\"); break;
            case '\n': out->append("\\n"); break;
            case '\r': out->append("\\r"); break;
            case '\t': out->append("\\t"); break;
            case '\b': out->append("\\b"); break;
            case '\f': out->append("\\f"); break;
            default:
                if (c < 0x20) {
                    out->append("\\u00");
                    out->push_back(hex[c >> 4]);
                    out->push_back(hex[c & 15]);
                } else {
                    out->push_back(ch);
                }
        }
    }
    out->push_back('"');
}

void json_dump(const json_value& v, json_number_style style, std::string* out) {
    switch (v.type) {
        case json_value::kind::null: out->append("null"); return;
        case json_value::kind::boolean: out->append(v.boolean ? "true" : "false"); return;
        case json_value::kind::number: out->append(json_format_number(v.text, style)); return;
        case json_value::kind::string: json_dump_string(v.text, out); return;
        case json_value::kind::array:
            out->push_back('[');
            for (size_t i = 0; i < v.items.size(); ++i) {
                if (i) out->append(", ");
                json_dump(v.items[i], style, out);
            }
            out->push_back(']');
            return;
        case json_value::kind::object:
            out->push_back('{');
            for (size_t i = 0; i < v.members.size(); ++i) {
                if (i) out->append(", ");
                json_dump_string(v.members[i].first, out);
                out->append(": ");
                json_dump(v.members[i].second, style, out);
            }
            out->push_back('}');
            return;
    }
}

std::string json_dump(const json_value& v, json_number_style style) {
    std::string out;
    json_dump(v, style, &out);
    return out;
}

}  // namespace tandem::text
