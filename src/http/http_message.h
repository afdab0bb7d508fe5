// http/http_message.h — Plain request and response values exchanged between the server's loop
// thread and handlers. No libuv or llhttp types leak past this header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::http {

using header_list = std::vector<std::pair<std::string, std::string>>;

struct request {
    std::string method;      // "GET", "POST", ...
    std::string target;      // as sent: path plus optional query
    std::string path;        // target without the query
    std::string query;       // after '?', undecoded
    header_list headers;     // names lower-cased, in arrival order
    std::string body;
    std::string request_id;  // X-Request-Id from the client when sane, else generated
    bool keep_alive = true;

    // Case-insensitive lookup (names are stored lower-case); empty when absent.
    std::string_view header(std::string_view lower_name) const;
};

struct response {
    int status = 200;
    header_list headers;
    std::string body;
    std::string content_type = "application/json";
};

const char* reason_phrase(int status);

// `{"error":{"message":...,"type":...,"param":...,"code":...}}`, the OpenAI error shape: `param`
// names the request field at fault and `code` is a short machine-readable string
// ("model_not_found"); either is null when empty. The HTTP status is not repeated in the body.
std::string error_body(std::string_view message, std::string_view type,
                       std::string_view param = {}, std::string_view code = {});

// Serializes the status line and headers (Content-Length for whole bodies; none for streams).
std::string serialize_head(int status, const header_list& headers, std::string_view content_type,
                           const std::string* body_for_length, bool keep_alive,
                           std::string_view request_id);

}  // namespace tandem::http
