// grammar/grammar.h — Constrained decoding: which tokens may come next, per request.
//
// The grammar engine is xgrammar's C++ core (built from its pinned PyPI sdist by
// third_party/xgrammar/build.sh; no xgrammar type appears in this header). A constraint is
// written as an xgrammar *structural tag* (JSON: sequences of literal text, free text, JSON
// schemas in JSON or DeepSeek DSML form, ...), which grammar/chat_constraint.h builds from a
// chat request. That JSON text is the constraint's whole identity: it travels to a pd prefill
// peer, which compiles it again against the same vocabulary and so computes the same masks
// (design invariant 8).
//
//   compiler  one per vocabulary (process-wide, thread-safe, caches compiled grammars)
//   compiled  an immutable grammar bound to the vocabulary; shared by every request using it
//   matcher   one per request, on the scheduler thread: the mask of allowed next tokens, and
//             the accepted tokens so far
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tandem::text {
class tokenizer;
}

namespace tandem::grammar {

// The vocabulary as the grammar engine sees it: each id's exact bytes. An empty entry is a
// token the grammar can never produce (control tokens; ids the tokenizer lacks). `stop_tokens`
// end the output once the grammar is complete (EOS).
struct vocabulary {
    std::vector<std::string> token_bytes;  // size = the model's vocabulary (logit row width)
    std::vector<int32_t> stop_tokens;
};

// Token bytes from tandem's tokenizer, for a model whose logit rows are `model_vocab` wide.
// Added tokens are hidden (empty) except the markup the output parser reads: <think>,
// </think> and ｜DSML｜, which a grammar may spell.
vocabulary vocabulary_from_tokenizer(const text::tokenizer& tok, int32_t model_vocab, int32_t eos);

// 32-bit words of a mask over `vocab` tokens (bit v % 32 of word v / 32 set: token v allowed).
int64_t mask_words(int32_t vocab);

class compiled;

class compiler {
public:
    // Preprocesses the vocabulary (sorting, a token trie): tens of milliseconds for 129k ids.
    explicit compiler(const vocabulary& vocab, int threads = 1);
    ~compiler();
    compiler(const compiler&) = delete;
    compiler& operator=(const compiler&) = delete;

    // Compiles a structural tag (JSON text). Repeated specs hit a cache. A spec the grammar
    // engine refuses (bad JSON, an unsupported or contradictory schema) is invalid_argument,
    // with the engine's message.
    result<std::shared_ptr<const compiled>> compile(std::string_view structural_tag_json);

    int32_t vocab_size() const;

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

class matcher {
public:
    explicit matcher(std::shared_ptr<const compiled> grammar);
    ~matcher();
    matcher(matcher&&) noexcept;
    matcher& operator=(matcher&&) noexcept;

    // The allowed next tokens as a bitmask of mask_words(vocab) words; valid until the next
    // call. Deterministic: a function of the grammar and the tokens accepted so far.
    std::span<const uint32_t> next_mask();
    // Advances by one generated token; false (state unchanged) when the grammar forbids it.
    bool accept(int32_t token);
    // A stop token was accepted: the output is complete.
    bool terminated() const;
    int32_t vocab_size() const;

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

// The largest structural tag accepted (it travels in a pd PREFILL_JOB).
inline constexpr size_t k_max_spec_bytes = 1 << 20;

// The process-wide compiler for the model in `model_dir` (its tokenizer.json) with logit rows
// `model_vocab` wide: made on first use (loading the tokenizer, preprocessing the vocabulary),
// then shared by the API and a pd prefill engine of the same process. Thread-safe.
result<std::shared_ptr<compiler>> compiler_for_model(const std::string& model_dir,
                                                     int32_t model_vocab, int32_t eos);

// Whether `token` is allowed by `mask`.
inline bool mask_allows(std::span<const uint32_t> mask, int32_t token) {
    return (mask[static_cast<size_t>(token) / 32] >> (static_cast<uint32_t>(token) % 32)) & 1u;
}

}  // namespace tandem::grammar
