// Chunked prefill, token-by-token decode, batching and thread count must not change a single bit
// of a sequence's logits (issue 4 deliverables 4 and 5; design invariant 8).
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

std::vector<int32_t> random_prompt(uint64_t seed, int64_t n, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(2 + rng() % static_cast<uint64_t>(vocab - 2));
    return t;
}

// Runs `tokens` in chunks of `chunk` tokens, returning all positions' logits.
std::vector<float> run_chunked(model& m, const std::vector<int32_t>& tokens, size_t chunk) {
    auto seq = m.new_sequence();
    std::vector<float> all;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
        size_t n = std::min(chunk, tokens.size() - at);
        forward_item it{std::span<const int32_t>(&tokens[at], n), int64_t(at), seq.get(), true};
        auto out = m.forward(std::span<const forward_item>(&it, 1));
        REQUIRE_MESSAGE(out.is_ok(), out.error().message());
        all.insert(all.end(), out->logits[0].begin(), out->logits[0].end());
    }
    return all;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct tiny_model {
    temp_dir dir{"consistency"};
    std::unique_ptr<model> m;
    explicit tiny_model(int threads, uint64_t seed = 3) {
        make_checkpoint("tiny", seed, dir.str());
        auto r = model::load(dir.str(), model_options{numerics_mode::hf, threads});
        REQUIRE_MESSAGE(r.is_ok(), r.error().message());
        m = std::move(r.value());
    }
};

}  // namespace

TEST_CASE("model: chunked prefill and decode give bitwise the full-sequence logits") {
    tiny_model tm(2);
    const auto tokens = random_prompt(11, 140, tm.m->config().vocab_size);
    const std::vector<float> full = run_chunked(*tm.m, tokens, tokens.size());
    for (size_t chunk : {1, 3, 8, 17, 64}) {
        CAPTURE(chunk);
        CHECK(bitwise_equal(run_chunked(*tm.m, tokens, chunk), full));
    }
}

TEST_CASE("model: a sequence's logits do not depend on the batch or the thread count") {
    tiny_model tm(2);
    const int64_t vocab = tm.m->config().vocab_size;
    const auto a = random_prompt(21, 45, vocab), b = random_prompt(22, 30, vocab), c = random_prompt(23, 1, vocab);
    const std::vector<float> alone_a = run_chunked(*tm.m, a, a.size());
    const std::vector<float> alone_b = run_chunked(*tm.m, b, b.size());
    const std::vector<float> alone_c = run_chunked(*tm.m, c, c.size());
    for (int order = 0; order < 2; ++order) {
        CAPTURE(order);
        auto sa = tm.m->new_sequence(), sb = tm.m->new_sequence(), sc = tm.m->new_sequence();
        std::vector<forward_item> items = {{a, 0, sa.get(), true}, {b, 0, sb.get(), true}, {c, 0, sc.get(), true}};
        if (order == 1) std::swap(items[0], items[2]);
        auto out = tm.m->forward(items);
        REQUIRE(out.is_ok());
        CHECK(bitwise_equal(out->logits[order == 1 ? 2 : 0], alone_a));
        CHECK(bitwise_equal(out->logits[1], alone_b));
        CHECK(bitwise_equal(out->logits[order == 1 ? 0 : 2], alone_c));
    }
    // A decode step batched with another sequence's prefill chunk.
    auto s1 = tm.m->new_sequence(), s2 = tm.m->new_sequence();
    forward_item first{std::span<const int32_t>(a.data(), a.size() - 1), 0, s1.get(), false};
    REQUIRE(tm.m->forward(std::span<const forward_item>(&first, 1)).is_ok());
    std::vector<forward_item> mixed = {{b, 0, s2.get(), false},
                                       {std::span<const int32_t>(&a.back(), 1), int64_t(a.size() - 1), s1.get(), false}};
    auto out = tm.m->forward(mixed);
    REQUIRE(out.is_ok());
    CHECK(std::memcmp(out->logits[1].data(), &alone_a[(a.size() - 1) * vocab], vocab * sizeof(float)) == 0);

    tiny_model one_thread(1);
    CHECK(bitwise_equal(run_chunked(*one_thread.m, a, a.size()), alone_a));
}

TEST_CASE("model: forward rejects bad batches with clear errors") {
    tiny_model tm(1);
    auto seq = tm.m->new_sequence();
    std::vector<int32_t> bad = {5, int32_t(tm.m->config().vocab_size)};
    forward_item it{bad, 0, seq.get(), false};
    auto out = tm.m->forward(std::span<const forward_item>(&it, 1));
    REQUIRE_FALSE(out.is_ok());
    CHECK(out.error().message().find("outside") != std::string::npos);
    std::vector<int32_t> ok = {5};
    forward_item wrong_pos{ok, 3, seq.get(), false};
    CHECK_FALSE(tm.m->forward(std::span<const forward_item>(&wrong_pos, 1)).is_ok());
}
