#include "api/chat_pipeline.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "grammar/chat_constraint.h"
#include "grammar/grammar.h"

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
                                   const text::tokenizer& tok, int32_t eos_token_id) {
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
    auto spec = grammar::chat_constraint(chat, *prompt);
    if (!spec) return spec.error();
    if (spec->has_value()) {
        if (opts.sampling.ignore_eos) {
            return make_error(error_code::invalid_argument,
                              "ignore_eos: cannot be used with response_format, strict tools or a forced "
                              "tool_choice (the constrained output ends at EOS)");
        }
        if ((*spec)->size() > grammar::k_max_spec_bytes) {
            return make_error(error_code::invalid_argument,
                              fmt::format("response_format / tools: the schemas are too large to constrain "
                                          "decoding ({} bytes of grammar, at most {})",
                                          (*spec)->size(), grammar::k_max_spec_bytes));
        }
        p.grammar_spec = std::move(**spec);
    }
    p.hidden_ids = opts.sampling.stop_token_ids;
    p.hidden_ids.push_back(eos_token_id);
    p.stops = opts.stop;
    return p;
}

}  // namespace tandem::api
