#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace tandem::log {
namespace {

std::atomic<int> g_min_level{static_cast<int>(level::info)};
thread_local std::string t_request_id;

const char* level_tag(level lvl) {
    switch (lvl) {
        case level::debug: return "DEBUG";
        case level::info: return "INFO ";
        case level::warn: return "WARN ";
        case level::error: return "ERROR";
        case level::off: return "OFF  ";
    }
    return "?????";
}

std::string utc_timestamp() {
    using namespace std::chrono;
    auto now = system_clock::now();
    std::time_t secs = system_clock::to_time_t(now);
    auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

}  // namespace

bool parse_level(std::string_view name, level* out) {
    static constexpr std::pair<std::string_view, level> names[] = {
        {"debug", level::debug}, {"info", level::info}, {"warn", level::warn},
        {"error", level::error}, {"off", level::off}};
    for (const auto& [n, l] : names) {
        if (n == name) {
            *out = l;
            return true;
        }
    }
    return false;
}

void set_level(level min_level) { g_min_level.store(static_cast<int>(min_level)); }
level current_level() { return static_cast<level>(g_min_level.load()); }
bool enabled(level lvl) { return lvl != level::off && static_cast<int>(lvl) >= g_min_level.load(); }

void write(level lvl, std::string_view message) {
    std::string line = utc_timestamp();
    line += ' ';
    line += level_tag(lvl);
    if (!t_request_id.empty()) {
        line += " [";
        line += t_request_id;
        line += ']';
    }
    line += ' ';
    line += message;
    line += '\n';
    // One write(2) per line keeps lines whole when several threads log at once.
    const char* data = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, data, left);
        if (n <= 0) break;
        data += n;
        left -= static_cast<size_t>(n);
    }
}

request_scope::request_scope(std::string id) : previous_(std::move(t_request_id)) {
    t_request_id = std::move(id);
}
request_scope::~request_scope() { t_request_id = std::move(previous_); }

const std::string& current_request_id() { return t_request_id; }

}  // namespace tandem::log
