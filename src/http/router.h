// http/router.h — Path routing: a table of (method, path, handler). A path matches exactly,
// except that one ending in "/*" matches its prefix followed by anything non-empty
// ("/v1/models/*" takes "/v1/models/org/name"). An unknown path is answered 404, a known path
// with another method 405 with an Allow header, both with OpenAI error bodies.
#pragma once

#include <string>
#include <vector>

#include "http/server.h"

namespace tandem::http {

struct route {
    std::string method;
    std::string path;
    handler on_request;
};

class router {
public:
    void add(std::string method, std::string path, handler h);
    // Dispatches to the matching route, or answers 404/405 itself.
    void operator()(const request& req, responder out) const;
    const std::vector<route>& routes() const { return routes_; }

private:
    std::vector<route> routes_;
};

bool route_matches(std::string_view pattern, std::string_view path);

// Sends `{"error":{...}}` with the given status; `type` is the OpenAI error type.
void send_error(const responder& out, int status, std::string_view message,
                std::string_view type = "invalid_request_error", header_list headers = {});

}  // namespace tandem::http
