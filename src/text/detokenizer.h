// text/detokenizer.h — Streaming detokenization: token ids in, complete UTF-8 text out.
//
// A byte-level token can end in the middle of a multi-byte character; the detokenizer holds
// such an incomplete tail (at most 3 bytes) until the next token completes it, so every
// returned piece is valid UTF-8 and the concatenation of all pieces plus finish() equals
// tokenizer::decode() of all ids (ill-formed bytes become U+FFFD, exactly as there).
// Special tokens such as <think> and ｜DSML｜ are kept: the output parser needs them.
// One object per sequence; not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "text/tokenizer.h"

namespace tandem::text {

class stream_detokenizer {
public:
    explicit stream_detokenizer(std::shared_ptr<const tokenizer> tok, bool skip_special = false);

    // Appends the text completed by `id` to *out (possibly nothing). Unknown ids are an error.
    status push(token_id id, std::string* out);
    // Flushes an incomplete tail as U+FFFD (end of sequence).
    void finish(std::string* out);
    // Bytes held back waiting for the rest of a character.
    int64_t pending_bytes() const { return static_cast<int64_t>(pending_.size()); }

private:
    std::shared_ptr<const tokenizer> tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace tandem::text
