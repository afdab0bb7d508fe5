// text/detokenizer.h — Streaming detokenization: token ids in, complete UTF-8 text out.
//
// A byte-level token can end in the middle of a multi-byte character; the detokenizer holds
// such an incomplete tail (at most 3 bytes) until the next token completes it, so every
// returned piece is valid UTF-8 and the concatenation of all pieces plus finish() equals
// tokenizer::decode() of all ids (ill-formed bytes become U+FFFD, exactly as there).
// Which added tokens reach the text is a policy: the output parser needs <think>, </think> and
// ｜DSML｜, while other specials (<｜User｜>, BOS/EOS, placeholders a speculative draft may
// produce) must never leak into visible content (spec §4.6, §5.4).
// One object per sequence; not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "text/tokenizer.h"

namespace tandem::text {

enum class special_token_policy {
    keep_all,      // every token's text, as tokenizer::decode(ids)
    skip_special,  // drop tokens marked "special" in tokenizer.json (HF skip_special_tokens)
    markup_only,   // drop every added token except <think>, </think> and ｜DSML｜ (for the parser)
};

class stream_detokenizer {
public:
    explicit stream_detokenizer(std::shared_ptr<const tokenizer> tok,
                                special_token_policy policy = special_token_policy::keep_all);

    // Appends the text completed by `id` to *out (possibly nothing). Unknown ids are an error.
    status push(token_id id, std::string* out);
    // Flushes an incomplete tail as U+FFFD (end of sequence).
    void finish(std::string* out);
    // Bytes held back waiting for the rest of a character.
    int64_t pending_bytes() const { return static_cast<int64_t>(pending_.size()); }
    // Added tokens dropped by the policy so far (a metric: specials where text belongs).
    int64_t dropped_tokens() const { return dropped_; }

private:
    bool drops(token_id id) const;

    std::shared_ptr<const tokenizer> tok_;
    special_token_policy policy_;
    token_id markup_ids_[3] = {-1, -1, -1};
    int64_t dropped_ = 0;
    std::string pending_;
};

}  // namespace tandem::text
