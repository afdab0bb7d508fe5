#include "core/status.h"

namespace tandem {

const char* error_code_name(error_code code) {
    switch (code) {
        case error_code::ok: return "ok";
        case error_code::invalid_argument: return "invalid_argument";
        case error_code::not_found: return "not_found";
        case error_code::out_of_range: return "out_of_range";
        case error_code::too_large: return "too_large";
        case error_code::unavailable: return "unavailable";
        case error_code::deadline_exceeded: return "deadline_exceeded";
        case error_code::data_loss: return "data_loss";
        case error_code::io_error: return "io_error";
        case error_code::internal: return "internal";
    }
    return "unknown";
}

}  // namespace tandem
