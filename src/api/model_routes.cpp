#include "api/model_routes.h"

#include <fmt/format.h>

#include <ctime>

#include "api/routes.h"
#include "core/json_writer.h"

namespace tandem::api {
namespace {

void write_model(json_writer& w, const config& cfg) {
    static const int64_t created = static_cast<int64_t>(std::time(nullptr));
    w.begin_object()
        .key("id").value(cfg.model.served_name)
        .key("object").value("model")
        .key("created").value(created)
        .key("owned_by").value("tandem")
        .key("root").value(cfg.model.path)
        .end_object();
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Model ids may hold '/' ("org/name"); a client may send it percent-encoded.
std::string percent_decode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
            out.push_back(static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2])));
            i += 2;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

}  // namespace

void handle_models(app_state& app, const http::request&, const http::responder& out) {
    json_writer w;
    w.begin_object().key("object").value("list").key("data").begin_array();
    write_model(w, app.cfg());
    w.end_array().end_object();
    out.send({200, {}, w.take()});
}

void handle_model(app_state& app, const http::request& req, const http::responder& out) {
    constexpr std::string_view prefix = "/v1/models/";
    const std::string id = percent_decode(std::string_view(req.path).substr(prefix.size()));
    if (id != app.cfg().model.served_name) {
        return send_status_error(
            out, make_error(error_code::not_found,
                            fmt::format("The model '{}' does not exist; this server serves '{}'", id,
                                        app.cfg().model.served_name))
                     .with_param("model"));
    }
    json_writer w;
    write_model(w, app.cfg());
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
