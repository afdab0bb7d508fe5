#include "api/openai_common.h"

#include <fmt/format.h>

namespace tandem::api {

status check_model_name(const app_state& app, const std::string& requested) {
    const std::string& served = app.cfg().model.served_name;
    if (requested.empty() || requested == served) return status::ok();
    return make_error(error_code::not_found,
                      fmt::format("model '{}' does not exist; this server serves '{}'", requested, served))
        .with_param("model");
}

engine::submit_request make_submit(const std::vector<int32_t>& prompt, const generation_options& o,
                                   int64_t index, const std::string& trace_id,
                                   const engine::engine& eng) {
    engine::submit_request sub;
    sub.prompt = prompt;
    sub.params = o.sampling;
    if (o.sampling.seed) sub.params.seed = *o.sampling.seed + static_cast<uint64_t>(index);
    if (!o.max_tokens_given) {
        // Without max_tokens the context bounds generation (as OpenAI's chat API does).
        sub.params.max_tokens = std::max<int64_t>(1, eng.max_context_tokens() -
                                                         static_cast<int64_t>(prompt.size()));
    }
    sub.trace_id = trace_id;
    return sub;
}

std::string token_text(const text::tokenizer& tok, int32_t id) {
    int32_t one[1] = {id};
    auto s = tok.decode(one);
    return s ? *s : std::string();
}

}  // namespace tandem::api
