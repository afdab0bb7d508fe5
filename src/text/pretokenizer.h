// text/pretokenizer.h — The HF `Split` pre-tokenizer chain (behavior Isolated) on PCRE2.
//
// Each Split regex is applied to the pieces left by the previous one, so a lookahead such as
// `\s+(?!\S)` sees only the current piece, as in HF tokenizers. Patterns are compiled with
// PCRE2_UTF | PCRE2_UCP and JIT. `\s` / `\S` are rewritten to the Unicode White_Space property,
// which is what Oniguruma (HF's regex engine) uses; PCRE2's own `\s` also matches U+180E.
// `\p{L|M|N|P|S}` get the code points Unicode 15.0-16.0 added to the class appended, because
// HF's Oniguruma knows Unicode 16.0 while Debian 12's PCRE2 10.42 knows 14.0.
// Input must be valid UTF-8 (the tokenizer sanitizes first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tandem::text {

struct text_span {
    int64_t begin;
    int64_t end;
};

// Rewrites an Oniguruma pattern for PCRE2: `\s`/`\S` as explicit White_Space classes and
// `\p{X}` extended to Unicode 16.0.
result<std::string> translate_onig_pattern(std::string_view pattern);

class split_chain {
public:
    split_chain();
    ~split_chain();
    split_chain(split_chain&&) noexcept;
    split_chain& operator=(split_chain&&) noexcept;

    // Adds one Split(pattern, Isolated) stage.
    status add_stage(std::string_view onig_pattern);
    int64_t stage_count() const;

    // Splits `text` (valid UTF-8) into pre-token spans covering it completely, in order.
    void split(std::string_view text, std::vector<text_span>* out) const;

private:
    struct stage;
    std::vector<std::unique_ptr<stage>> stages_;
};

}  // namespace tandem::text
