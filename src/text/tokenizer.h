// text/tokenizer.h — Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
//
// Owns: the vocabulary, merge ranks, added tokens and the Split pre-tokenizer chain of one model
// directory's tokenizer.json. Ids are identical to HF `tokenizers` on the same file (the
// reference for DeepSeek-V4; checked in test/unit/text against stored outputs).
//
// Two encoders, on purpose:
//   encode(text)                   plain text. Added-token strings such as "<｜User｜>" or
//                                  "<think>" typed by a user are ordinary text (BPE pieces).
//                                  This is what user content, tool results etc. go through.
//   encode_with_added_tokens(text) HF semantics: added-token strings become their ids. Used only
//                                  for text that the server itself produced (and for /tokenize of
//                                  a raw prompt, which is documented as trusted).
// The chat encoder (text/chat_encoder.h) emits special-token ids for template pieces itself.
//
// Invalid UTF-8 input: maximal ill-formed subparts become U+FFFD before tokenization (see
// text/utf8.h), i.e. the ids equal the reference's ids for the lossily decoded string.
// The object is immutable after load and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tandem::text {

using token_id = int32_t;

class tokenizer {
public:
    // Loads `<path>` (a tokenizer.json file). Errors name the offending key.
    static result<std::shared_ptr<const tokenizer>> load_file(const std::string& path);
    static result<std::shared_ptr<const tokenizer>> load_json(std::string_view json,
                                                              const std::string& origin);
    ~tokenizer();

    std::vector<token_id> encode(std::string_view text) const;
    std::vector<token_id> encode_with_added_tokens(std::string_view text) const;
    // Appends to `out`; the building blocks of the two calls above.
    void encode_append(std::string_view text, std::vector<token_id>* out) const;
    void encode_with_added_tokens_append(std::string_view text, std::vector<token_id>* out) const;

    // Concatenated bytes of the tokens, lossily decoded (ill-formed UTF-8 -> U+FFFD) as HF's
    // ByteLevel decoder does. Added tokens decode to their content. With skip_special, tokens
    // marked "special" in added_tokens are dropped. Unknown ids are an error naming the id.
    result<std::string> decode(std::span<const token_id> ids, bool skip_special = false) const;
    // Raw bytes of one token (may be part of a UTF-8 character); empty view for unknown ids.
    std::string_view token_bytes(token_id id) const;
    bool contains(token_id id) const;  // the id names a token (vocabulary holes do not)
    bool is_special(token_id id) const;
    bool is_added(token_id id) const;

    // The id of an added token by its exact content ("<｜User｜>"), if any.
    std::optional<token_id> added_token_id(std::string_view content) const;
    // One more than the largest id (embedding rows the tokenizer can address).
    int32_t id_count() const;

    struct impl;

private:
    explicit tokenizer(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace tandem::text
