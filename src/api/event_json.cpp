#include "api/event_json.h"

namespace tandem::api {

void write_token_logprobs(json_writer& w, const std::vector<engine::position_logprobs>& lps) {
    w.begin_array();
    for (const auto& p : lps) {
        w.begin_object().key("token").value(static_cast<int64_t>(p.chosen.token));
        w.key("logprob").value(static_cast<double>(p.chosen.logprob));
        w.key("top_logprobs").begin_array();
        for (const auto& t : p.top) {
            w.begin_object().key("token").value(static_cast<int64_t>(t.token));
            w.key("logprob").value(static_cast<double>(t.logprob)).end_object();
        }
        w.end_array().end_object();
    }
    w.end_array();
}

void write_usage(json_writer& w, int64_t prompt_tokens, int64_t completion_tokens) {
    w.begin_object()
        .key("prompt_tokens").value(prompt_tokens)
        .key("completion_tokens").value(completion_tokens)
        .key("total_tokens").value(prompt_tokens + completion_tokens)
        .end_object();
}

std::string sse_data(std::string_view json) {
    std::string out = "data: ";
    out += json;
    out += "\n\n";
    return out;
}

}  // namespace tandem::api
