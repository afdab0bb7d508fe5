#include "engine/request_state.h"

#include <fmt/format.h>

#include "core/check.h"

namespace tandem::engine {

const char* request_state_name(request_state s) {
    switch (s) {
        case request_state::queued:
            return "queued";
        case request_state::prefilling:
            return "prefilling";
        case request_state::transferring:
            return "transferring";
        case request_state::decoding:
            return "decoding";
        case request_state::finished:
            return "finished";
        case request_state::aborted:
            return "aborted";
        case request_state::failed:
            return "failed";
    }
    return "unknown";
}

bool is_terminal(request_state s) {
    return s == request_state::finished || s == request_state::aborted ||
           s == request_state::failed;
}

bool can_transition(request_state from, request_state to) {
    using rs = request_state;
    if (is_terminal(from)) return false;
    if (to == rs::finished || to == rs::aborted || to == rs::failed) return true;
    switch (from) {
        case rs::queued:
            return to == rs::prefilling || to == rs::transferring;
        case rs::transferring:
            return to == rs::decoding || to == rs::queued;
        case rs::prefilling:
            return to == rs::decoding || to == rs::queued;
        case rs::decoding:
            return to == rs::queued;
        default:
            return false;
    }
}

const std::string& state_record::last_reason() const {
    static const std::string none;
    return history.empty() ? none : history.back().reason;
}

void transition(state_record& rec, request_state to, std::string reason) {
    if (!can_transition(rec.state, to)) {
        std::string msg =
            fmt::format("request state {} -> {} is not an allowed edge ({})",
                        request_state_name(rec.state), request_state_name(to), reason);
        check_failed("can_transition(from, to)", msg.c_str());
    }
    rec.history.push_back({rec.state, to, std::move(reason)});
    rec.state = to;
}

}  // namespace tandem::engine
