// Fuzz target: the HTTP request parser (http/request_parser.h) the server feeds socket reads to.
// Input: one byte choosing how the stream is cut into reads, then the bytes a client sends.
// Properties: never a crash or an over-read (ASan); the same requests and the same verdict
// whether the bytes arrive at once or in pieces; limits hold; every refusal is a 400 or 413
// with a message; a parsed request's path and query are its target split at '?'.
#include <vector>

#include "fuzz_support.h"
#include "http/request_parser.h"

using namespace tandem;
using tandem::http::request_parser;

namespace {

constexpr http::parse_limits k_limits{512, 2048};  // small, so that 413s are reachable

struct parsed_stream {
    std::vector<std::string> requests;  // each request, flattened for comparison
    int refusal = 0;
    bool partial = false;  // bytes of an unfinished request at the end
    int continues = 0;     // 100-continue replies asked for
};

std::string flatten(const http::request& r) {
    std::string s = r.method + ' ' + r.target + (r.keep_alive ? " keep\n" : " close\n");
    for (const auto& [k, v] : r.headers) s += k + ": " + v + '\n';
    return s + '\n' + r.body;
}

void check_request(const http::request& r) {
    FUZZ_CHECK(static_cast<int64_t>(r.body.size()) <= k_limits.max_body_bytes);
    FUZZ_CHECK(static_cast<int64_t>(r.target.size()) <= k_limits.max_header_bytes);
    std::string joined = r.query.empty() && r.target.find('?') == std::string::npos
                             ? r.path : r.path + '?' + r.query;
    FUZZ_CHECK(joined == r.target, "path '{}' query '{}' target '{}'", r.path, r.query, r.target);
    for (const auto& h : r.headers)
        for (char ch : h.first) FUZZ_CHECK(!(ch >= 'A' && ch <= 'Z'), "header name '{}'", h.first);
    FUZZ_CHECK(!r.request_id.empty() && r.request_id.size() <= 128);
}

parsed_stream parse(std::string_view bytes, size_t read_size) {
    parsed_stream out;
    request_parser p(k_limits, {nullptr, [&out] { out.continues++; }});
    size_t at = 0;
    while (at < bytes.size() && out.refusal == 0) {
        std::string_view read = bytes.substr(at, read_size);
        at += read.size();
        // As the connection does: a complete request is handled, then the rest of the read is fed.
        while (!read.empty()) {
            request_parser::fed r = p.feed(read.data(), read.size());
            if (r.result == request_parser::outcome::refused) {
                out.refusal = p.refusal_status();
                FUZZ_CHECK(out.refusal == 400 || out.refusal == 413, "status {}", out.refusal);
                FUZZ_CHECK(!p.refusal_message().empty());
                break;
            }
            FUZZ_CHECK(r.consumed <= read.size());
            if (r.result == request_parser::outcome::need_more) break;
            check_request(p.req());
            out.requests.push_back(flatten(p.req()));
            p.resume();
            read.remove_prefix(r.consumed);
        }
    }
    out.partial = out.refusal == 0 && p.message_started();
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::input_reader in(data, size);
    size_t read_size = 1 + in.byte() % 97;
    std::string_view bytes = in.rest();
    parsed_stream whole = parse(bytes, bytes.size() + 1);
    parsed_stream pieces = parse(bytes, read_size);
    FUZZ_CHECK(whole.requests == pieces.requests, "{} vs {} requests with reads of {}",
               whole.requests.size(), pieces.requests.size(), read_size);
    // Which refusal comes first may depend on where reads end: llhttp hands a header span to the
    // size check when the span or the read ends, so a header section that crosses the limit
    // inside a span which then turns out malformed is a 413 in small reads and a 400 in one read.
    // Both refuse; otherwise the status must agree.
    const bool limit_or_syntax = whole.refusal != 0 && pieces.refusal != 0 &&
                                 (whole.refusal == 413 || pieces.refusal == 413) &&
                                 bytes.size() > static_cast<size_t>(k_limits.max_header_bytes);
    FUZZ_CHECK(whole.refusal == pieces.refusal || limit_or_syntax, "{} vs {}", whole.refusal,
               pieces.refusal);
    FUZZ_CHECK(whole.partial == pieces.partial);
    FUZZ_CHECK(whole.continues == pieces.continues);
    return 0;
}
