#include "http/router.h"

#include <fmt/format.h>

#include "http/server_impl.h"

namespace tandem::http {

void router::add(std::string method, std::string path, handler h) {
    routes_.push_back({std::move(method), std::move(path), std::move(h)});
}

bool route_matches(std::string_view pattern, std::string_view path) {
    if (pattern.ends_with("/*")) {
        const std::string_view prefix = pattern.substr(0, pattern.size() - 1);
        return path.size() > prefix.size() && path.starts_with(prefix);
    }
    return pattern == path;
}

void router::operator()(const request& req, responder out) const {
    std::string allowed;
    for (const route& r : routes_) {
        if (!route_matches(r.path, req.path)) continue;
        if (r.method == req.method) {
            r.on_request(req, std::move(out));
            return;
        }
        allowed += allowed.empty() ? r.method : ", " + r.method;
    }
    if (allowed.empty()) {
        send_error(out, 404, fmt::format("no route for {} {}", req.method, req.path),
                   "not_found_error");
    } else {
        send_error(out, 405, fmt::format("{} is not allowed on {} (allowed: {})", req.method,
                                         req.path, allowed),
                   "invalid_request_error", {{"Allow", allowed}});
    }
}

void send_error(const responder& out, int status, std::string_view message, std::string_view type,
                header_list headers) {
    out.send({status, std::move(headers), error_body(message, type)});
}

}  // namespace tandem::http
