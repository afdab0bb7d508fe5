// fuzz/fuzz_support.h — What the libFuzzer harnesses share: a check that fails loudly (libFuzzer
// saves the input as a crash), the rule that bad input is a client error, the request-body
// prologue every JSON route shares, the reference tokenizer, and a reader that carves a fuzz
// input into choices and pieces.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "api/json_body.h"
#include "core/status.h"
#include "http/http_message.h"
#include "tandem_build_config.h"
#include "text/tokenizer.h"

#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, \
                         #cond, fmt::format("" __VA_ARGS__).c_str());                          \
            std::abort();                                                                      \
        }                                                                                      \
    } while (0)

namespace tandem::fuzz {

// A request body the server refuses must be refused as the client's fault (a 4xx with a message),
// never as a 500: internal, data_loss and io_error would be bugs in our parsing.
inline bool is_client_error(const status& st) {
    switch (st.code()) {
        case error_code::invalid_argument:
        case error_code::out_of_range:
        case error_code::too_large:
        case error_code::not_found:
            return !st.message().empty();
        default:
            return false;
    }
}

// True when `r` holds a value. Otherwise the input was refused, which must be as the client's
// fault (FUZZ_CHECK aborts, saving the input, if not).
template <typename T>
bool accepted(const result<T>& r) {
    if (r) return true;
    FUZZ_CHECK(is_client_error(r.error()), "{}", r.error().message());
    return false;
}

// The fuzz input as a POST body, parsed as every JSON route parses it (json_object_or_400):
// `object` is empty when the body was refused, as a client error (checked). Not movable: the
// object points into the parser.
struct json_request {
    http::request req;
    simdjson::dom::parser parser;
    std::optional<simdjson::dom::object> object;

    json_request(const uint8_t* data, size_t size) {
        req.body.assign(reinterpret_cast<const char*>(data), size);
        auto doc = api::parse_json_object(parser, req);
        if (accepted(doc)) object = doc->get_object().value();
    }
    json_request(const json_request&) = delete;
    json_request& operator=(const json_request&) = delete;
};

// DeepSeek-V4's tokenizer as etc/setup.sh exports it (models/tokenizer/tokenizer.json). Harnesses
// that use it load it in LLVMFuzzerInitialize (TANDEM_FUZZ_LOAD_TOKENIZER): loading 6 MB of JSON
// under ASan inside the first input would count against libFuzzer's per-input -timeout, and on a
// loaded machine fail it (it did, on the empty input).
inline const text::tokenizer& reference_tokenizer() {
    static std::shared_ptr<const text::tokenizer> tok = [] {
        std::string path = std::string(TANDEM_SOURCE_ROOT) + "/models/tokenizer/tokenizer.json";
        auto loaded = text::tokenizer::load_file(path);
        if (!loaded) {
            std::fprintf(stderr, "fuzz: the reference tokenizer is missing (%s); run etc/setup.sh\n",
                         loaded.error().message().c_str());
            std::exit(1);
        }
        return std::move(loaded).value();
    }();
    return *tok;
}

// Takes choices and pieces off the front of the input; whatever is left is the payload.
class input_reader {
public:
    input_reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    uint8_t byte() { return size_ ? (--size_, *data_++) : 0; }
    uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
    std::string_view rest() const { return {reinterpret_cast<const char*>(data_), size_}; }
    std::string_view take(size_t n) {
        n = n < size_ ? n : size_;
        std::string_view s(reinterpret_cast<const char*>(data_), n);
        data_ += n;
        size_ -= n;
        return s;
    }
    bool empty() const { return size_ == 0; }

private:
    const uint8_t* data_;
    size_t size_;
};

}  // namespace tandem::fuzz

#define TANDEM_FUZZ_LOAD_TOKENIZER()                              \
    extern "C" int LLVMFuzzerInitialize(int*, char***) {          \
        tandem::fuzz::reference_tokenizer();                      \
        return 0;                                                 \
    }
