// core/check.h — Invariant checks. A failed check is a bug in tandem, never bad input: it logs
// the condition with its source location and aborts, so the bug is found where it happened.
#pragma once

#include <source_location>

namespace tandem {

[[noreturn]] void check_failed(const char* condition, const char* message,
                               std::source_location where = std::source_location::current());

}  // namespace tandem

#define TANDEM_CHECK(cond)                                            \
    do {                                                              \
        if (!(cond)) [[unlikely]] ::tandem::check_failed(#cond, ""); \
    } while (0)

#define TANDEM_CHECK_MSG(cond, msg)                                    \
    do {                                                               \
        if (!(cond)) [[unlikely]] ::tandem::check_failed(#cond, msg); \
    } while (0)
