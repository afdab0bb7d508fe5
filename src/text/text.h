// text/text.h — The text module: everything between bytes on the wire and token ids.
//
// Owns the tokenizer (tokenizer.h), streaming detokenization (detokenizer.h), the
// DeepSeek-V4 prompt format and the OpenAI request parser (chat.h), and the reasoning /
// DSML tool-call output parser (output_parser.h). Immutable objects (tokenizer) are shared
// between threads; the per-request ones (stream_detokenizer, output_parser) are not.
//
// Typical request path (what the API layer does):
//   auto tok  = text::tokenizer::load_file(model_dir + "/tokenizer.json");   // once
//   auto req  = text::chat_request_from_openai_json(body);                   // 400 on error
//   auto p    = text::render_chat(*req);                                      // 400 on error
//   auto ids  = text::tokenize_prompt(*p, **tok);
//   text::stream_detokenizer detok(*tok, text::special_token_policy::markup_only);
//   text::output_parser parser({.starts_in_reasoning = p->generation_starts_in_reasoning});
//   per token: detok.push(id, &piece); parser.push(piece, &events);  -> SSE deltas
//   at the end: detok.finish(&piece); parser.push(piece, &events); parser.finish(&events);
//   finish_reason "tool_calls" iff parser.tool_call_count() > 0; count parser.malformed().
// Callers must not depend on how the tokenizer stores its tables or on the parser's states.
#pragma once

#include "text/chat.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"
