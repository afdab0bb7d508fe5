#include "api/chat_pipeline.h"

#include <simdjson.h>

namespace tandem::api {
namespace {

std::vector<std::string> tool_names(const text::chat_request& chat) {
    std::vector<std::string> names;
    simdjson::dom::parser parser;
    for (const std::string& fn : chat.tools) {
        simdjson::dom::element doc;
        std::string_view name;
        if (!parser.parse(fn).get(doc) && !doc["name"].get(name)) names.emplace_back(name);
    }
    return names;
}

}  // namespace

result<chat_pipeline> prepare_chat(const text::chat_request& chat, const generation_options& opts,
                                   const text::tokenizer& tok, const engine::engine& eng) {
    auto prompt = text::render_chat(chat);
    if (!prompt) return prompt.error();
    auto ids = text::tokenize_prompt(*prompt, tok);
    if (!ids) return ids.error();
    chat_pipeline p;
    p.prompt_ids = std::move(*ids);
    const bool with_tools = !chat.tools.empty() && chat.tool_choice != text::tool_choice_kind::none;
    p.parser_options.starts_in_reasoning = prompt->generation_starts_in_reasoning;
    p.parser_options.starts_in_tool_calls =
        with_tools && (chat.tool_choice == text::tool_choice_kind::required ||
                       chat.tool_choice == text::tool_choice_kind::named);
    if (with_tools) {
        p.parser_options.check_tool_names = true;
        p.parser_options.tool_names = tool_names(chat);
    }
    p.hidden_ids = opts.sampling.stop_token_ids;
    p.hidden_ids.push_back(eng.eos_token_id());
    p.stops = opts.stop;
    return p;
}

std::unique_ptr<choice_text> chat_pipeline::make_text(std::shared_ptr<const text::tokenizer> tok) const {
    // The parser needs <think>, </think> and the DSML markup; other specials never show.
    return std::make_unique<choice_text>(std::move(tok), text::special_token_policy::markup_only,
                                         stops, hidden_ids);
}

std::unique_ptr<text::output_parser> chat_pipeline::make_parser() const {
    return std::make_unique<text::output_parser>(parser_options);
}

}  // namespace tandem::api
