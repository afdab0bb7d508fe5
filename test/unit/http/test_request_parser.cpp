// The HTTP request parser alone (http/request_parser.h); the server tests drive it over sockets.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "http/request_parser.h"

using namespace tandem::http;

namespace {

struct parsed {
    std::vector<std::string> requests;  // method, target, body
    int refusal = 0;
    int continues = 0;
};

parsed parse(const std::string& bytes, size_t read_size, parse_limits limits = {}) {
    parsed out;
    request_parser p(limits, {nullptr, [&out] { out.continues++; }});
    for (size_t at = 0; at < bytes.size() && out.refusal == 0; at += read_size) {
        std::string_view read = std::string_view(bytes).substr(at, read_size);
        while (!read.empty()) {
            auto r = p.feed(read.data(), read.size());
            if (r.result == request_parser::outcome::refused) {
                out.refusal = p.refusal_status();
                break;
            }
            if (r.result == request_parser::outcome::need_more) break;
            out.requests.push_back(p.req().method + " " + p.req().target + " " + p.req().body);
            p.resume();
            read.remove_prefix(r.consumed);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("request parser: pipelined requests are the same read whole or a byte at a time") {
    const std::string stream =
        "POST /generate?x=1 HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}"
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        "GET /health HTTP/1.1\r\n\r\n";
    parsed whole = parse(stream, stream.size());
    REQUIRE(whole.requests.size() == 3);
    CHECK(whole.requests[0] == "POST /generate?x=1 {}");
    CHECK(whole.requests[1] == "POST /a abc");
    CHECK(whole.requests[2] == "GET /health ");
    CHECK(whole.continues == 1);
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}}) {
        parsed pieces = parse(stream, n);
        CHECK(pieces.requests == whole.requests);
        CHECK(pieces.continues == 1);
    }
}

TEST_CASE("request parser: limits are 413s, garbage a 400, both with a message") {
    parse_limits small{64, 8};
    CHECK(parse("POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n123456789", 1000, small).refusal == 413);
    CHECK(parse("GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n", 1000, small).refusal == 413);
    CHECK(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n0\r\n\r\n", 5, small)
              .refusal == 413);
    request_parser p({}, {});
    const std::string bad = "GET / HTTP/1.1\r\nBad Header\r\n\r\n";
    CHECK(p.feed(bad.data(), bad.size()).result == request_parser::outcome::refused);
    CHECK(p.refusal_status() == 400);
    CHECK(p.refusal_message().find("malformed HTTP request") != std::string::npos);
}

// Found by fuzz/http_request: an empty header line (":") left the parser "in a value", so the
// next header's name, split across two reads, became two headers ("x" and "-request-id").
TEST_CASE("request parser: a header name split across reads after an empty header line is one name") {
    const std::string stream = "POST /v1ionn/\n:\r\nX-Request-Id: a-.\r\n\n";
    auto headers_of = [&](size_t read_size) {
        request_parser p(parse_limits{}, {});
        std::vector<std::pair<std::string, std::string>> headers;
        std::string id;
        for (size_t at = 0; at < stream.size(); at += read_size) {
            auto r = p.feed(stream.data() + at, std::min(read_size, stream.size() - at));
            REQUIRE(r.result != request_parser::outcome::refused);
            if (r.result == request_parser::outcome::complete) {
                headers = p.req().headers;
                id = p.req().request_id;
                break;
            }
        }
        return std::make_pair(headers, id);
    };
    const auto whole = headers_of(stream.size());
    REQUIRE(whole.first.size() == 1);
    CHECK(whole.first[0].first == "x-request-id");
    CHECK(whole.first[0].second == "a-.");
    CHECK(whole.second == "a-.");
    for (size_t n = 1; n <= 9; ++n) {
        CAPTURE(n);
        CHECK(headers_of(n) == whole);
    }
}
