// text/utf8.h — UTF-8 validation and repair shared by the tokenizer and the detokenizer.
//
// Policy for invalid UTF-8 (the tokenizer's documented behaviour): every maximal ill-formed
// subpart is replaced by U+FFFD, exactly as Python's bytes.decode("utf-8", errors="replace") and
// Rust's String::from_utf8_lossy do (Unicode "substitution of maximal subparts"). So encoding
// invalid bytes gives the same ids the reference tokenizer gives for the lossily decoded string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::text {

inline constexpr std::string_view replacement_char = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when it is ill-formed or
// incomplete. `*subpart` receives the length of the maximal ill-formed subpart (>= 1) when 0 is
// returned and the sequence is not merely truncated by the end of `s`; `*truncated` says whether
// the bytes are a valid prefix cut by the end of `s`.
int utf8_sequence_length(std::string_view s, int64_t i, int* subpart, bool* truncated);

bool utf8_is_valid(std::string_view s);

// Returns `s` with every maximal ill-formed subpart replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);

// Number of bytes at the end of `s` that form a valid but incomplete sequence (0..3).
int utf8_incomplete_tail(std::string_view s);

}  // namespace tandem::text
