// http/request_parser.h — llhttp behind a request-at-a-time parser: bytes in, one whole request
// (or a refusal) out. The connection (connection.cpp) feeds it what a socket reads; the fuzz
// harness (fuzz/http_request.cpp) feeds it anything. No libuv here, and no llhttp type in the API.
//
// One request at a time: after `complete`, the bytes past `consumed` belong to the next request
// and must be fed again after resume() (the connection holds them while the handler runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http/http_message.h"

namespace tandem::http {

struct parse_limits {
    int64_t max_header_bytes = 65536;  // request line + headers; more is a 413
    int64_t max_body_bytes = 16 << 20;  // declared or received; more is a 413
};

class request_parser {
public:
    // What the owner does at two moments of a request (either may be empty).
    struct hooks {
        std::function<void()> on_message_begin;    // its first byte: the connection arms a timeout
        std::function<void()> on_expect_continue;  // "Expect: 100-continue": send the interim reply
    };
    enum class outcome {
        need_more,  // every byte was used; the request is not whole yet
        complete,   // req() is whole; `consumed` bytes were used
        refused,    // the stream cannot go on: refusal_status() (413 or 400), refusal_message()
    };
    struct fed {
        outcome result = outcome::need_more;
        size_t consumed = 0;
    };

    request_parser(parse_limits limits, hooks h);
    ~request_parser();
    request_parser(const request_parser&) = delete;
    request_parser& operator=(const request_parser&) = delete;

    fed feed(const char* data, size_t len);
    // After a complete request was handled: ready for the next one (req() is cleared).
    void resume();

    request& req();
    const request& req() const;
    bool message_started() const;  // some bytes of a request arrived, not all of it
    int refusal_status() const;
    const std::string& refusal_message() const;

    struct state;  // llhttp and the request being built (request_parser.cpp)

private:
    std::unique_ptr<state> s_;
};

}  // namespace tandem::http
