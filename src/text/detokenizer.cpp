// text/detokenizer.cpp — Incremental UTF-8 assembly over token bytes.
#include "text/detokenizer.h"

#include "text/utf8.h"

namespace tandem::text {

stream_detokenizer::stream_detokenizer(std::shared_ptr<const tokenizer> tok,
                                       special_token_policy policy)
    : tok_(std::move(tok)), policy_(policy) {
    const std::string_view markup[] = {"<think>", "</think>", "｜DSML｜"};
    for (int i = 0; i < 3; ++i) markup_ids_[i] = tok_->added_token_id(markup[i]).value_or(-1);
}

bool stream_detokenizer::drops(token_id id) const {
    switch (policy_) {
        case special_token_policy::keep_all: return false;
        case special_token_policy::skip_special: return tok_->is_special(id);
        case special_token_policy::markup_only:
            return tok_->is_added(id) && id != markup_ids_[0] && id != markup_ids_[1] &&
                   id != markup_ids_[2];
    }
    return false;
}

status stream_detokenizer::push(token_id id, std::string* out) {
    if (!tok_->contains(id)) {
        return make_error(error_code::invalid_argument,
                          "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    if (drops(id)) {
        ++dropped_;
        return status::ok();
    }
    pending_.append(tok_->token_bytes(id));
    // Emit everything except a valid-but-incomplete tail; ill-formed bytes become U+FFFD now,
    // because no later byte can make them valid.
    const int keep = utf8_incomplete_tail(pending_);
    const std::string_view ready(pending_.data(), pending_.size() - keep);
    if (utf8_is_valid(ready)) out->append(ready);
    else out->append(utf8_sanitize(ready));
    pending_.erase(0, pending_.size() - keep);
    return status::ok();
}

void stream_detokenizer::finish(std::string* out) {
    if (!pending_.empty()) out->append(utf8_sanitize(pending_));
    pending_.clear();
}

}  // namespace tandem::text
