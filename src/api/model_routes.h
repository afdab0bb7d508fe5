// api/model_routes.h — GET /v1/models (the one model this process serves) and
// GET /v1/models/{id} (that model, or an OpenAI-style 404).
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_models(app_state& app, const http::request& req, const http::responder& out);
void handle_model(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
