// The per-choice half of the chat pipeline (text path and parser), apart from prepare_chat so
// that reading a request (chat_pipeline.cpp, also linked by the fuzz harnesses) does not bring
// in the response machinery of choice_session.
#include "api/chat_pipeline.h"

namespace tandem::api {

std::unique_ptr<choice_text> chat_pipeline::make_text(std::shared_ptr<const text::tokenizer> tok) const {
    // The parser needs <think>, </think> and the DSML markup; other specials never show.
    return std::make_unique<choice_text>(std::move(tok), text::special_token_policy::markup_only,
                                         stops, hidden_ids);
}

std::unique_ptr<text::output_parser> chat_pipeline::make_parser() const {
    return std::make_unique<text::output_parser>(parser_options);
}

}  // namespace tandem::api
