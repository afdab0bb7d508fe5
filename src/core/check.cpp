#include "core/check.h"

#include <cstdlib>

#include "core/log.h"

namespace tandem {

void check_failed(const char* condition, const char* message, std::source_location where) {
    log::write(log::level::error,
               fmt::format("invariant violated: {} {} at {}:{} in {}", condition, message,
                           where.file_name(), where.line(), where.function_name()));
    std::abort();
}

}  // namespace tandem
