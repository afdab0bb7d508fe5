// Tokenizer conformance: ids must equal HF tokenizers / deepseek_recipe on the stored corpus
// (tools/text/gen_tokenizer_golden.py), plus properties that hold for any input.
#include <simdjson.h>

#include <doctest/doctest.h>


#include "text/utf8.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

using testing::from_hex;
using testing::reference_tokenizer;

std::vector<token_id> ids_of(simdjson::dom::element e) {
    std::vector<token_id> ids;
    for (simdjson::dom::element v : e.get_array()) ids.push_back(static_cast<token_id>(int64_t(v)));
    return ids;
}

uint64_t fnv1a64(const std::vector<token_id>& ids) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (token_id id : ids) {
        auto u = static_cast<uint32_t>(id);
        for (int k = 0; k < 4; ++k) {
            h ^= (u >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ULL;
        }
    }
    return h;
}

struct golden {
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    golden() {
        root = parser.load(testing::source_path("test/golden/text/tokenizer_cases.json"));
    }
};

TEST_CASE("tokenizer: published vectors (spec §5)") {
    auto tok = reference_tokenizer();
    CHECK(tok->encode("hello") == std::vector<token_id>{33310});
    CHECK(tok->encode("Hello! I am DeepSeek.") == std::vector<token_id>{19923, 3, 342, 1030, 22651, 4374, 1465, 16});
    CHECK(tok->encode("    int x;") == std::vector<token_id>{361, 688, 1527, 29});
    CHECK(tok->encode("x  \n  y") == std::vector<token_id>{90, 2143, 223, 383});
    CHECK(tok->encode_with_added_tokens("<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>") ==
          std::vector<token_id>{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1});
    CHECK(tok->id_count() == 129280);
    CHECK(tok->added_token_id("｜DSML｜") == 128825);
}

TEST_CASE("tokenizer: user text never yields special tokens") {
    auto tok = reference_tokenizer();
    for (std::string_view s : {"<｜User｜>", "<think>", "</think>", "｜DSML｜", "<｜end▁of▁sentence｜>"}) {
        auto ids = tok->encode(s);
        CHECK(ids.size() > 1);
        for (token_id id : ids) CHECK_FALSE(tok->is_added(id));
        CHECK(tok->decode(ids).value() == s);
    }
}

TEST_CASE("tokenizer: stored corpus matches the reference ids") {
    auto tok = reference_tokenizer();
    golden g;
    int64_t checked = 0;
    for (simdjson::dom::element c : g.root["cases"].get_array()) {
        std::string_view kind = c["kind"];
        const std::string text = from_hex(std::string_view(c["hex"]));
        const std::vector<token_id> expected = ids_of(c["ids"]);
        const auto got = kind == "added" ? tok->encode_with_added_tokens(text) : tok->encode(text);
        if (got != expected) {
            FAIL_CHECK("mismatch on case " << checked << " (" << std::string_view(c["name"]) << ")");
        }
        if (kind == "plain") {
            CHECK(tok->decode(got).value() == text);
        } else if (kind == "invalid_utf8") {
            CHECK(tok->decode(got).value() == utf8_sanitize(text));
        }
        ++checked;
    }
    CHECK(checked > 2500);
}

std::string big_text(simdjson::dom::element recipe, simdjson::dom::element cases) {
    std::string unit;
    if (std::string_view(recipe["kind"]) == "repeat") {
        unit = from_hex(std::string_view(recipe["unit_hex"]));
    } else {
        for (simdjson::dom::element c : cases.get_array()) {
            if (std::string_view(c["kind"]) != "plain") continue;
            if (!unit.empty()) unit.push_back('\n');
            unit += from_hex(std::string_view(c["hex"]));
        }
    }
    const size_t mib = 1 << 20;
    std::string text;
    text.reserve(mib + unit.size());
    for (size_t k = 0; k < (mib + unit.size() - 1) / unit.size(); ++k) text += unit;
    return text;
}

// No clock here: a time limit was a verdict on machine speed (under TSan these took 11-28 s).
// Encoding speed, and its scaling from 4 KiB pieces to 1 MiB, is bench/text's job.
TEST_CASE("tokenizer: 1 MiB inputs (id count, id hash, round trip)") {
    auto tok = reference_tokenizer();
    golden g;
    for (simdjson::dom::element r : g.root["big"].get_array()) {
        const std::string text = big_text(r, g.root["cases"]);
        CAPTURE(std::string_view(r["name"]));
        REQUIRE(static_cast<int64_t>(text.size()) == int64_t(r["bytes"]));
        const auto ids = tok->encode(text);
        CHECK(static_cast<int64_t>(ids.size()) == int64_t(r["count"]));
        char hash[17];
        snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(ids)));
        CHECK(std::string(hash) == std::string_view(r["fnv1a64"]));
        CHECK(tok->decode(ids).value() == text);
    }
}

TEST_CASE("tokenizer: invalid UTF-8 policy is U+FFFD per maximal subpart") {
    CHECK(utf8_sanitize("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
    CHECK(utf8_sanitize("\xE4\xBD") == "\xEF\xBF\xBD");            // truncated: one subpart
    CHECK(utf8_sanitize("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
    CHECK(utf8_sanitize("\xF0\x9F\x98" "x") == "\xEF\xBF\xBD" "x");
    auto tok = reference_tokenizer();
    CHECK(tok->encode("a\xFF" "b") == tok->encode("a\xEF\xBF\xBD" "b"));
}

TEST_CASE("tokenizer: decode rejects unknown ids and can skip specials") {
    auto tok = reference_tokenizer();
    std::vector<token_id> bad{5, 129280};
    CHECK_FALSE(tok->decode(bad).is_ok());
    std::vector<token_id> with_bos{0, 33310, 128821};
    CHECK(tok->decode(with_bos).value() == "<｜begin▁of▁sentence｜>hello<think>");
    CHECK(tok->decode(with_bos, true).value() == "hello<think>");  // <think> is not "special"
}

TEST_CASE("tokenizer: load errors name the key") {
    auto r = tokenizer::load_json(R"({"model":{"type":"Unigram"},"pre_tokenizer":{"type":"ByteLevel"}})", "t.json");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().message().find("model.type") != std::string::npos);
    auto missing = tokenizer::load_file("/nonexistent/tokenizer.json");
    CHECK(missing.error().code() == error_code::not_found);
}

}  // namespace
}  // namespace tandem::text
