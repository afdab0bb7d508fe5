// api/model_routes.h — GET /v1/models: the one model this process serves.
#pragma once

#include "api/app_state.h"

namespace tandem::api {

void handle_models(app_state& app, const http::request& req, const http::responder& out);

}  // namespace tandem::api
