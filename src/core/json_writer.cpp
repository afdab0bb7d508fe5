#include "core/json_writer.h"

#include <fmt/format.h>

#include <cmath>

namespace tandem {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not valid.
size_t utf8_sequence_length(std::string_view s, size_t i) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = byte(i);
    size_t n;
    uint32_t min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; }
    else return 0;
    if (i + n > s.size()) return 0;
    uint32_t cp = c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

}  // namespace

void json_escape_into(std::string& out, std::string_view s) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"': out += "\\\""; ++i; continue;
            case '\\': out += "\\\\"; ++i; continue;
            case '\n': out += "\\n"; ++i; continue;
            case '\r': out += "\\r"; ++i; continue;
            case '\t': out += "\\t"; ++i; continue;
            case '\b': out += "\\b"; ++i; continue;
            case '\f': out += "\\f"; ++i; continue;
            default: break;
        }
        if (c < 0x20) {
            out += fmt::format("\\u{:04x}", c);
            ++i;
            continue;
        }
        size_t n = utf8_sequence_length(s, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";  // U+FFFD for each invalid byte
            ++i;
            continue;
        }
        out.append(s.data() + i, n);
        i += n;
    }
    out += '"';
}

void json_writer::separate() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!first_.empty()) {
        if (!first_.back()) out_ += ',';
        first_.back() = false;
    }
}

json_writer& json_writer::begin_object() {
    separate();
    out_ += '{';
    first_.push_back(true);
    return *this;
}
json_writer& json_writer::end_object() {
    out_ += '}';
    first_.pop_back();
    return *this;
}
json_writer& json_writer::begin_array() {
    separate();
    out_ += '[';
    first_.push_back(true);
    return *this;
}
json_writer& json_writer::end_array() {
    out_ += ']';
    first_.pop_back();
    return *this;
}
json_writer& json_writer::key(std::string_view k) {
    separate();
    json_escape_into(out_, k);
    out_ += ':';
    after_key_ = true;
    return *this;
}
json_writer& json_writer::value(std::string_view s) {
    separate();
    json_escape_into(out_, s);
    return *this;
}
json_writer& json_writer::value(int64_t x) {
    separate();
    out_ += fmt::format("{}", x);
    return *this;
}
json_writer& json_writer::value(uint64_t x) {
    separate();
    out_ += fmt::format("{}", x);
    return *this;
}
json_writer& json_writer::value(double x) {
    separate();
    // JSON has no NaN or infinity; OpenAI clients expect a number, so clamp to the finite range.
    if (std::isnan(x)) x = 0.0;
    if (std::isinf(x)) x = x > 0 ? 3.4028234663852886e38 : -3.4028234663852886e38;
    out_ += fmt::format("{}", x);
    return *this;
}
json_writer& json_writer::value(bool b) {
    separate();
    out_ += b ? "true" : "false";
    return *this;
}
json_writer& json_writer::null() {
    separate();
    out_ += "null";
    return *this;
}
json_writer& json_writer::raw(std::string_view json) {
    separate();
    out_ += json;
    return *this;
}

}  // namespace tandem
