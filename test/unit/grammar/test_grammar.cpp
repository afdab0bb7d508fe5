// The mask plumbing: xgrammar's masks through our wrapper, the sampler applying them, and the
// scheduler keeping each request's grammar state (alone, batched, and its first token).
#include <doctest/doctest.h>

#include "../engine/engine_test_util.h"
#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "text/json_value.h"

using namespace tandem;
using namespace tandem::grammar;
using namespace tandem::grammar::testing;

namespace {

const char* k_ok_schema =
    R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false})";

int32_t id_of(const vocabulary& v, std::string_view bytes) {
    for (size_t i = 0; i < v.token_bytes.size(); ++i) {
        if (v.token_bytes[i] == bytes) return static_cast<int32_t>(i);
    }
    FAIL("no token " << bytes);
    return -1;
}

std::shared_ptr<const compiled> compile_or_fail(compiler& c, const std::string& spec) {
    auto g = c.compile(spec);
    REQUIRE_MESSAGE(g.is_ok(), g.error().message());
    return *g;
}

}  // namespace

TEST_CASE("grammar: the mask allows exactly what can continue the grammar") {
    vocabulary v = small_vocabulary();
    compiler c(v);
    matcher m(compile_or_fail(c, structural_tag_for_schema(k_ok_schema)));
    REQUIRE(m.vocab_size() == 64);
    auto first = m.next_mask();
    CHECK(first.size() == static_cast<size_t>(mask_words(64)));
    CHECK(mask_allows(first, id_of(v, "{")));
    CHECK(mask_allows(first, id_of(v, "{\"")));
    CHECK_FALSE(mask_allows(first, id_of(v, "}")));
    CHECK_FALSE(mask_allows(first, id_of(v, "x")));
    CHECK_FALSE(mask_allows(first, 0));  // EOS only once the object is complete
    CHECK_FALSE(m.accept(id_of(v, "x")));  // refused, state unchanged
    for (std::string_view piece : {"{", "\"ok\"", ": "}) REQUIRE(m.accept(id_of(v, piece)));
    auto value = m.next_mask();
    CHECK(mask_allows(value, id_of(v, "true")));
    CHECK(mask_allows(value, id_of(v, "fa")));
    CHECK_FALSE(mask_allows(value, id_of(v, "null")));
    CHECK_FALSE(mask_allows(value, id_of(v, "1")));
    REQUIRE(m.accept(id_of(v, "false")));
    CHECK_FALSE(mask_allows(m.next_mask(), 0));
    REQUIRE(m.accept(id_of(v, "}")));
    auto done = m.next_mask();
    CHECK(allowed_ids(done, 64) == std::vector<int32_t>{0});
    REQUIRE(m.accept(0));
    CHECK(m.terminated());
    CHECK_FALSE(m.accept(id_of(v, " ")));
}

TEST_CASE("grammar: bad specs are invalid_argument with the engine's reason") {
    compiler c(small_vocabulary());
    for (const std::string& spec : {std::string("not json"), std::string(R"({"type":"structural_tag"})"),
                                   structural_tag_for_schema(R"({"$ref":"#/$defs/missing"})"),
                                   structural_tag_for_schema(R"({"type":"object","required":5})")}) {
        auto g = c.compile(spec);
        CHECK_FALSE(g.is_ok());
        if (!g.is_ok()) {
            CHECK(g.error().code() == error_code::invalid_argument);
            CHECK(g.error().message().rfind("grammar: ", 0) == 0);
        }
    }
}

TEST_CASE("grammar: random walks through the mask always end in matching JSON") {
    vocabulary v = small_vocabulary();
    compiler c(v);
    const std::string schema =
        R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99},)"
        R"("tags":{"type":"array","items":{"enum":["ab","ba"]},"maxItems":3}},"required":["ok","n"],"additionalProperties":false})";
    auto g = compile_or_fail(c, structural_tag_for_schema(schema));
    for (uint64_t seed = 1; seed <= 30; ++seed) {
        matcher m(g);
        bool ended = false;
        std::vector<int32_t> tokens = random_walk(m, seed, 400, &ended);
        REQUIRE_MESSAGE(ended, "seed " << seed << ": " << spell(v, tokens));
        auto parsed = text::json_parse(spell(v, tokens));
        REQUIRE_MESSAGE(parsed.is_ok(), spell(v, tokens));
        REQUIRE(parsed->is_object());
        const text::json_value* ok = parsed->find("ok");
        const text::json_value* n = parsed->find("n");
        REQUIRE(ok != nullptr);
        CHECK(ok->type == text::json_value::kind::boolean);
        REQUIRE(n != nullptr);
        CHECK(n->type == text::json_value::kind::number);
        const int value = std::stoi(n->text);
        CHECK((value >= 0 && value <= 99));
        for (const auto& [key, _] : parsed->members) CHECK((key == "ok" || key == "n" || key == "tags"));
        if (const text::json_value* tags = parsed->find("tags")) {
            CHECK(tags->items.size() <= 3);
            for (const auto& t : tags->items) CHECK((t.text == "ab" || t.text == "ba"));
        }
    }
}

TEST_CASE("grammar: the same grammar and tokens give the same masks (compiled twice)") {
    vocabulary v = small_vocabulary();
    compiler a(v), b(v);
    const std::string spec = structural_tag_for_schema(k_ok_schema);
    matcher ma(compile_or_fail(a, spec)), mb(compile_or_fail(b, spec));
    bool ended = false;
    std::vector<int32_t> walk;
    {
        matcher probe(compile_or_fail(a, spec));
        walk = random_walk(probe, 99, 100, &ended);
        REQUIRE(ended);
    }
    for (int32_t t : walk) {
        auto x = ma.next_mask();
        std::vector<uint32_t> first(x.begin(), x.end());
        auto y = mb.next_mask();
        CHECK(first == std::vector<uint32_t>(y.begin(), y.end()));
        REQUIRE(ma.accept(t));
        REQUIRE(mb.accept(t));
    }
}

TEST_CASE("sampler: a token mask removes disallowed tokens from greedy and from draws") {
    std::vector<float> logits(70, 0.0f);
    logits[3] = 5.0f;   // best, disallowed
    logits[40] = 4.0f;  // best allowed
    logits[65] = 4.5f;  // in the last partial word, disallowed
    std::vector<uint32_t> allowed(static_cast<size_t>(mask_words(70)), 0);
    for (int32_t t : {10, 40, 41, 64, 69}) allowed[t / 32] |= 1u << (t % 32);
    std::vector<float> scratch;
    engine::sampling_params greedy;
    greedy.temperature = 0.0;
    greedy.logprobs = 1;
    engine::sample_context ctx{{}, {}, 0, 0};
    auto r = engine::sample_token(logits, greedy, ctx, scratch, allowed);
    CHECK(r.token == 40);
    CHECK(r.logprobs.top[0].token == 3);  // logprobs stay those of the raw distribution
    engine::sampling_params hot;
    hot.temperature = 5.0;
    hot.top_p = 0.99;
    for (uint64_t seed = 0; seed < 300; ++seed) {
        engine::sample_context c{{}, {}, seed, seed % 7};
        const int32_t t = engine::sample_token(logits, hot, c, scratch, allowed).token;
        CHECK(mask_allows(allowed, t));
    }
}

TEST_CASE("scheduler: constrained requests follow their grammar, batched with free ones") {
    using namespace tandem::engine;
    vocabulary v = small_vocabulary();
    compiler c(v);
    auto g = compile_or_fail(c, structural_tag_for_schema(k_ok_schema));
    fake_executor_options fo;  // 64 ids, EOS 0
    auto t = test::make_test_engine(fo, {});
    std::vector<std::unique_ptr<test::collector>> constrained, free;
    std::vector<std::vector<int32_t>> free_prompts;
    for (int i = 0; i < 8; ++i) {
        submit_request req;
        req.prompt = test::make_prompt(static_cast<uint64_t>(i), 5 + i, 64);
        req.params.max_tokens = 64;
        req.params.temperature = i % 2 ? 1.0 : 0.0;
        req.params.seed = static_cast<uint64_t>(i);
        req.params.grammar_spec = "(compiled below)";
        req.params.grammar = g;
        constrained.push_back(std::make_unique<test::collector>());
        req.sink = constrained.back()->sink();
        REQUIRE(t.eng->submit(std::move(req)).is_ok());
        submit_request other;
        other.prompt = test::make_prompt(100 + static_cast<uint64_t>(i), 6, 64);
        other.params.max_tokens = 12;
        other.params.temperature = 0.0;
        other.params.ignore_eos = true;
        free_prompts.push_back(other.prompt);
        free.push_back(std::make_unique<test::collector>());
        other.sink = free.back()->sink();
        REQUIRE(t.eng->submit(std::move(other)).is_ok());
    }
    for (size_t i = 0; i < constrained.size(); ++i) {
        test::collector& col = *constrained[i];
        REQUIRE(col.wait_final());
        CHECK(col.finals == 1);
        REQUIRE(col.last.reason == finish_reason::stop);
        REQUIRE(!col.tokens.empty());
        CHECK(col.tokens.back() == 0);  // EOS, accepted by the grammar
        std::vector<int32_t> body(col.tokens.begin(), col.tokens.end() - 1);
        auto parsed = text::json_parse(spell(v, body));
        REQUIRE_MESSAGE(parsed.is_ok(), spell(v, body));
        REQUIRE(parsed->find("ok") != nullptr);
        CHECK(parsed->find("ok")->type == text::json_value::kind::boolean);
        matcher replay(g);  // every token was allowed where it was sampled
        for (int32_t tok : col.tokens) CHECK(replay.accept(tok));
        CHECK(replay.terminated());
    }
    sampling_params fp;
    fp.max_tokens = 12;
    fp.temperature = 0.0;
    fp.ignore_eos = true;
    for (size_t i = 0; i < free.size(); ++i) {
        REQUIRE(free[i]->wait_final());
        CHECK(free[i]->tokens == test::reference_tokens(free_prompts[i], fp, 0, fo));
    }
}

TEST_CASE("scheduler: the grammar stops a request at max_tokens like any other (finish length)") {
    using namespace tandem::engine;
    vocabulary v = small_vocabulary();
    compiler c(v);
    auto g = compile_or_fail(c, structural_tag_for_schema(k_ok_schema));
    auto t = test::make_test_engine(fake_executor_options{}, {});
    test::collector col;
    submit_request req;
    req.prompt = {5, 6, 7};
    req.params.max_tokens = 2;
    req.params.temperature = 0.0;
    req.params.grammar = g;
    req.sink = col.sink();
    REQUIRE(t.eng->submit(std::move(req)).is_ok());
    REQUIRE(col.wait_final());
    CHECK(col.last.reason == finish_reason::length);
    REQUIRE(col.tokens.size() == 2);
    matcher replay(g);
    for (int32_t tok : col.tokens) CHECK(replay.accept(tok));
    CHECK_FALSE(replay.terminated());
}
