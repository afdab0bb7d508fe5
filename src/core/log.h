// core/log.h — One line per event: timestamp, level, thread-local request id, message.
//
//   2026-11-29T10:24:05.123Z INFO  [req-00000042] admitted prompt_tokens=17
//
// Lines are written whole with one write(2) so concurrent threads never interleave. The level
// and destination are set once at startup from [logging]; the request id is a thread-local
// scope (log_request_scope) so code deep in the engine needs no logger argument.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::log {

enum class level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

// Returns false when `name` is not one of debug, info, warn, error, off.
bool parse_level(std::string_view name, level* out);
void set_level(level min_level);
level current_level();
bool enabled(level lvl);

// Writes one complete line (the newline is added). Thread-safe.
void write(level lvl, std::string_view message);

// Marks every line logged on this thread while the scope lives with a request id.
class request_scope {
public:
    explicit request_scope(std::string id);
    ~request_scope();
    request_scope(const request_scope&) = delete;
    request_scope& operator=(const request_scope&) = delete;

private:
    std::string previous_;
};

const std::string& current_request_id();

}  // namespace tandem::log

#define TANDEM_LOG_AT(lvl, ...)                                                    \
    do {                                                                           \
        if (::tandem::log::enabled(lvl)) ::tandem::log::write(lvl, fmt::format(__VA_ARGS__)); \
    } while (0)
#define TANDEM_LOG_DEBUG(...) TANDEM_LOG_AT(::tandem::log::level::debug, __VA_ARGS__)
#define TANDEM_LOG_INFO(...) TANDEM_LOG_AT(::tandem::log::level::info, __VA_ARGS__)
#define TANDEM_LOG_WARN(...) TANDEM_LOG_AT(::tandem::log::level::warn, __VA_ARGS__)
#define TANDEM_LOG_ERROR(...) TANDEM_LOG_AT(::tandem::log::level::error, __VA_ARGS__)
