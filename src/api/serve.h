// api/serve.h — `tandem serve`: bring the process up, serve until SIGINT/SIGTERM, drain, exit.
#pragma once

#include "core/config.h"

namespace tandem::api {

// Returns the process exit code: 0 after a graceful shutdown, 1 when startup failed.
int run_server(const config& cfg);

}  // namespace tandem::api
