// api/chat_pipeline.h — The path every chat-shaped endpoint shares (/v1/chat/completions and
// Anthropic's /v1/messages): a parsed text::chat_request is rendered and tokenized, and each
// choice gets its text path (token ids → text with stop strings → DSML/reasoning parser).
// The endpoints differ only in how they read the request and write the response.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "api/choice_session.h"
#include "api/generation_options.h"
#include "engine/engine.h"
#include "text/chat.h"
#include "text/output_parser.h"

namespace tandem::api {

struct chat_pipeline {
    std::vector<int32_t> prompt_ids;
    text::output_parser_options parser_options;
    std::vector<int32_t> hidden_ids;  // end generation without being text: stop ids and EOS
    std::vector<std::string> stops;   // stop strings
    // The output grammar (grammar/chat_constraint.h) when response_format, strict tools or a
    // forced tool_choice ask for one; empty otherwise. Compiled by when_grammar_ready().
    std::string grammar_spec;

    // One choice's text path: detokenizer keeping only the markup the parser needs, stop
    // strings, and a fresh parser.
    std::unique_ptr<choice_text> make_text(std::shared_ptr<const text::tokenizer> tok) const;
    std::unique_ptr<text::output_parser> make_parser() const;
};

// Renders and tokenizes the request (errors are the request's: 400s), sets up parsing and
// writes the output grammar (400 for a schema that cannot be one, or ignore_eos with one).
// `eos_token_id` is the engine's (it ends generation without being text).
result<chat_pipeline> prepare_chat(const text::chat_request& chat, const generation_options& opts,
                                   const text::tokenizer& tok, int32_t eos_token_id);

}  // namespace tandem::api
