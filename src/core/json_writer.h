// core/json_writer.h — Builds JSON text directly into a string. Escapes every string so output
// is always valid JSON, whatever bytes the model or the client produced (invalid UTF-8 becomes
// U+FFFD). Commas are inserted automatically.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class json_writer {
public:
    json_writer& begin_object();
    json_writer& end_object();
    json_writer& begin_array();
    json_writer& end_array();
    json_writer& key(std::string_view k);
    json_writer& value(std::string_view s);
    json_writer& value(const char* s) { return value(std::string_view(s)); }
    json_writer& value(int64_t x);
    json_writer& value(int x) { return value(static_cast<int64_t>(x)); }
    json_writer& value(uint64_t x);
    json_writer& value(double x);
    json_writer& value(bool b);
    json_writer& null();
    json_writer& raw(std::string_view json);  // already-valid JSON text

    const std::string& str() const { return out_; }
    std::string take() { return std::move(out_); }

private:
    void separate();
    std::string out_;
    std::vector<bool> first_;  // per open container: no element written yet
    bool after_key_ = false;
};

// Appends `s` as a JSON string literal (with quotes).
void json_escape_into(std::string& out, std::string_view s);

}  // namespace tandem
