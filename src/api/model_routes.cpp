#include "api/model_routes.h"

#include <ctime>

#include "core/json_writer.h"

namespace tandem::api {

void handle_models(app_state& app, const http::request&, const http::responder& out) {
    static const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const config& cfg = app.cfg();
    json_writer w;
    w.begin_object().key("object").value("list").key("data").begin_array();
    w.begin_object()
        .key("id").value(cfg.model.served_name)
        .key("object").value("model")
        .key("created").value(created)
        .key("owned_by").value("tandem")
        .key("root").value(cfg.model.path)
        .end_object();
    w.end_array().end_object();
    out.send({200, {}, w.take()});
}

}  // namespace tandem::api
