#include <doctest/doctest.h>

#include "http/http_message.h"

using namespace tandem::http;

TEST_CASE("http: whole responses carry Content-Length, streams use chunked framing") {
    std::string body = "{}";
    std::string whole = serialize_head(200, {{"X-A", "1"}}, "application/json", &body, true, "rid");
    CHECK(whole.starts_with("HTTP/1.1 200 OK\r\n"));
    CHECK(whole.find("Content-Length: 2\r\n") != std::string::npos);
    CHECK(whole.find("X-Request-Id: rid\r\n") != std::string::npos);
    CHECK(whole.find("Connection: keep-alive\r\n") != std::string::npos);
    CHECK(whole.find("X-A: 1\r\n") != std::string::npos);
    CHECK(whole.ends_with("\r\n\r\n"));
    std::string stream = serialize_head(200, {}, "text/event-stream", nullptr, false, "");
    CHECK(stream.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
    CHECK(stream.find("Content-Length") == std::string::npos);
    CHECK(stream.find("Connection: close\r\n") != std::string::npos);
}

TEST_CASE("http: header lookup uses lower-case names") {
    request r;
    r.headers = {{"content-type", "application/json"}, {"x-request-id", "abc"}};
    CHECK(r.header("x-request-id") == "abc");
    CHECK(r.header("missing").empty());
}
