// Helpers for the grammar tests: a small hand-made vocabulary (so masks are easy to reason
// about and a fake model can drive the scheduler), random walks through a grammar, and
// structural tags for a JSON schema.
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace tandem::grammar::testing {

// 64 ids (the fake executor's default width): 0 = EOS, then JSON punctuation, letters, digits,
// a few multi-byte tokens, and the reasoning markup.
inline vocabulary small_vocabulary() {
    vocabulary v;
    v.token_bytes = {"",  "{",  "}",  "[",     "]",      "\"",     ":",  ",",  " ",  "\n",
                     "a", "b",  "c",  "k",     "o",      "t",      "r",  "u",  "e",  "f",
                     "l", "s",  "n",  "x",     "y",      "0",      "1",  "2",  "3",  "4",
                     "5", "6",  "7",  "8",     "9",      "-",      ".",  "ok", "true", "false",
                     "null", "\"ok\"", ": ", ", ", "<think>", "</think>", "hi", "{\"", "\"}", "  ",
                     "ab", "ba", "xy", "g", "0.", "10", "ko", "ta", "ra", "ue",
                     "fa", "ls", "se", "nu"};
    REQUIRE(v.token_bytes.size() == 64);
    v.stop_tokens = {0};
    return v;
}

inline std::string structural_tag_for_schema(const std::string& schema) {
    return R"({"type":"structural_tag","format":{"type":"json_schema","json_schema":)" + schema +
           R"(,"style":"json","max_whitespace_cnt":2}})";
}

inline std::string spell(const vocabulary& v, const std::vector<int32_t>& tokens) {
    std::string out;
    for (int32_t t : tokens) out += v.token_bytes[static_cast<size_t>(t)];
    return out;
}

inline std::vector<int32_t> allowed_ids(std::span<const uint32_t> mask, int32_t vocab) {
    std::vector<int32_t> out;
    for (int32_t t = 0; t < vocab; ++t) {
        if (mask_allows(mask, t)) out.push_back(t);
    }
    return out;
}

// Picks uniformly among the allowed tokens until the matcher accepts a stop token or
// `max_steps` pass. Returns the tokens without the stop token; `*ended` says whether it stopped.
inline std::vector<int32_t> random_walk(matcher& m, uint64_t seed, int max_steps, bool* ended) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> out;
    *ended = false;
    for (int step = 0; step < max_steps; ++step) {
        std::vector<int32_t> ids = allowed_ids(m.next_mask(), m.vocab_size());
        REQUIRE_MESSAGE(!ids.empty(), "the grammar allows no token after " << out.size());
        const int32_t t = ids[rng() % ids.size()];
        REQUIRE(m.accept(t));
        if (m.terminated()) {
            *ended = true;
            return out;
        }
        out.push_back(t);
    }
    return out;
}

}  // namespace tandem::grammar::testing
