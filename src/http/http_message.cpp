#include "http/http_message.h"

#include <fmt/format.h>

namespace tandem::http {

std::string_view request::header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers) {
        if (name == lower_name) return value;
    }
    return {};
}

const char* reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 415: return "Unsupported Media Type";
        case 422: return "Unprocessable Content";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        default: return "Unknown";
    }
}

std::string serialize_head(int status, const header_list& headers, std::string_view content_type,
                           const std::string* body_for_length, bool keep_alive,
                           std::string_view request_id) {
    std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
    if (!content_type.empty()) out += fmt::format("Content-Type: {}\r\n", content_type);
    if (body_for_length) {
        out += fmt::format("Content-Length: {}\r\n", body_for_length->size());
    } else {
        // Streams have no length up front: chunked framing keeps the connection reusable.
        out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
    }
    if (!request_id.empty()) out += fmt::format("X-Request-Id: {}\r\n", request_id);
    out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    for (const auto& [name, value] : headers) out += fmt::format("{}: {}\r\n", name, value);
    out += "\r\n";
    return out;
}

}  // namespace tandem::http
