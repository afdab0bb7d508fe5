// Streaming detokenizer: pieces are always valid UTF-8 and add up to tokenizer::decode().
#include <doctest/doctest.h>

#include <random>

#include "text/detokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

std::string stream_all(const std::shared_ptr<const tokenizer>& tok, const std::vector<token_id>& ids,
                       bool skip_special = false) {
    stream_detokenizer detok(tok, skip_special ? special_token_policy::skip_special : special_token_policy::keep_all);
    std::string all;
    for (token_id id : ids) {
        std::string piece;
        REQUIRE(detok.push(id, &piece).is_ok());
        CHECK(utf8_is_valid(piece));
        CHECK(detok.pending_bytes() <= 3);
        all += piece;
    }
    std::string tail;
    detok.finish(&tail);
    CHECK(utf8_is_valid(tail));
    return all + tail;
}

TEST_CASE("detokenizer: multi-byte characters split across tokens are held back") {
    auto tok = testing::reference_tokenizer();
    const std::string emoji = "\xF0\x9F\x98\x80";  // 😀, fed as four single-byte tokens
    stream_detokenizer detok(tok);
    std::string out;
    for (size_t k = 0; k < emoji.size(); ++k) {
        token_id byte_token = -1;
        for (token_id id = 0; id < 400 && byte_token < 0; ++id) {
            if (tok->token_bytes(id) == emoji.substr(k, 1)) byte_token = id;
        }
        REQUIRE(byte_token >= 0);
        REQUIRE(detok.push(byte_token, &out).is_ok());
        CHECK(out == (k + 1 < emoji.size() ? "" : emoji));
        CHECK(detok.pending_bytes() == (k + 1 < emoji.size() ? static_cast<int64_t>(k + 1) : 0));
    }
    // A truncated character at the end of the stream becomes one U+FFFD.
    stream_detokenizer cut(tok);
    std::string text;
    for (token_id id = 0; id < 400; ++id) {
        if (tok->token_bytes(id) == "\xE4") REQUIRE(cut.push(id, &text).is_ok());
    }
    CHECK(text.empty());
    cut.finish(&text);
    CHECK(text == replacement_char);
}

TEST_CASE("detokenizer: stream equals decode on corpus and random ids") {
    auto tok = testing::reference_tokenizer();
    for (std::string_view text : {"héllo wörld 😀👍🏽 你好，世界", "<think>a</think>｜DSML｜", "x\n\n  y"}) {
        auto ids = tok->encode(text);
        CHECK(stream_all(tok, ids) == text);
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<token_id> any(0, tok->id_count() - 1);
    for (int round = 0; round < 300; ++round) {
        std::vector<token_id> ids;
        const int n = 1 + static_cast<int>(rng() % 40);
        while (static_cast<int>(ids.size()) < n) {
            token_id id = any(rng);
            if (tok->contains(id)) ids.push_back(id);
        }
        CHECK(stream_all(tok, ids) == tok->decode(ids).value());
        CHECK(stream_all(tok, ids, true) == tok->decode(ids, true).value());
    }
}

TEST_CASE("detokenizer: markup_only keeps <think>, </think>, ｜DSML｜ and drops other specials") {
    auto tok = testing::reference_tokenizer();
    auto ids = tok->encode_with_added_tokens("<｜begin▁of▁sentence｜>a<think>b</think>c<｜User｜>d<｜DSML｜e<｜end▁of▁sentence｜>");
    stream_detokenizer detok(tok, special_token_policy::markup_only);
    std::string out;
    for (token_id id : ids) REQUIRE(detok.push(id, &out).is_ok());
    detok.finish(&out);
    CHECK(out == "a<think>b</think>cd<｜DSML｜e");
    CHECK(detok.dropped_tokens() == 3);
    // The same characters typed as plain text are text, not tokens: nothing is dropped.
    stream_detokenizer plain(tok, special_token_policy::markup_only);
    std::string text;
    for (token_id id : tok->encode("x<｜User｜>y")) REQUIRE(plain.push(id, &text).is_ok());
    CHECK(text == "x<｜User｜>y");
}

TEST_CASE("detokenizer: rejects ids outside the vocabulary") {
    stream_detokenizer detok(testing::reference_tokenizer());
    std::string out;
    CHECK_FALSE(detok.push(-1, &out).is_ok());
    CHECK_FALSE(detok.push(129280, &out).is_ok());
}

}  // namespace
}  // namespace tandem::text
