// grammar/chat_constraint.h — The output constraint a chat request asks for, as an xgrammar
// structural tag (grammar/grammar.h), or none.
//
// What is constrained (the prompt is rendered by text/chat.h; generation starts after it):
//   response_format json_schema   the content is one JSON value matching the schema
//   response_format json_object   the content is one JSON object
//   tool_choice required / named  the prompt already opened "<｜DSML｜tool_calls>\n"; the output
//                                 is one or more invokes of the offered tools (the named one),
//                                 each tool's arguments in DSML parameter form matching its
//                                 `parameters` schema, then "</｜DSML｜tool_calls>" and EOS
//   strict tools, tool_choice auto free content, optionally followed by one DSML block whose
//                                 invokes match the tools' schemas, then EOS
//   response_format + tools (auto, not strict): the JSON content, or a block of calls
// With thinking on, the reasoning before </think> stays free text (it may not contain <think>,
// </think> or ｜DSML｜, which would end it another way); the constraint starts after </think>.
// Whitespace runs are capped: 4 characters inside JSON, 1 between DSML tags and around DSML
// values (the canonical form has single newlines), so a weak model cannot spin on whitespace.
// DeepSeek's API refuses thinking with tool_choice required/named (text/chat_render.cpp), so
// that combination never reaches here.
//
// The markup matches what text/output_parser.h accepts (test/unit/grammar checks the canonical
// DSML of text/chat_common.cpp against the grammar, and the grammar's outputs against the parser).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "text/chat.h"

namespace tandem::grammar {

// The structural tag for `req` (rendered as `prompt`), or nullopt when the output is free.
// Errors (invalid_argument, → 400) name the request field: a schema that is not a JSON
// object or boolean, tool parameters that are not an object, or a constraint that cannot
// follow a prefix assistant message.
// `req.parallel_tool_calls` false allows one invoke per block.
result<std::optional<std::string>> chat_constraint(const text::chat_request& req,
                                                   const text::rendered_prompt& prompt);

}  // namespace tandem::grammar
