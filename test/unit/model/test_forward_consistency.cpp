// Chunked prefill, token-by-token decode, batching and thread count must not change a single bit
// of a sequence's logits (issue 4 deliverables 4 and 5; design invariant 8).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <thread>

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
std::vector<float> run_chunked(session& ss, const std::vector<int32_t>& tokens, size_t chunk) {
    cache::slot_ref seq = ss.new_sequence();
    std::vector<float> all;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
        size_t n = std::min(chunk, tokens.size() - at);
        auto rows = ss.run(seq, std::span<const int32_t>(&tokens[at], n), int64_t(at), true);
        all.insert(all.end(), rows.begin(), rows.end());
    }
    ss.pool->free_sequence(seq);
    return all;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct tiny_model {
    temp_dir dir{"consistency"};
    std::unique_ptr<session> ss;
    explicit tiny_model(int threads, cache::kv_dtype kv = cache::kv_dtype::fp32,
                        cache::index_k_dtype ik = cache::index_k_dtype::fp32) {
        make_checkpoint("tiny", 3, dir.str());
        ss = std::make_unique<session>(dir.str(), threads, kv, ik);
    }
};

}  // namespace

TEST_CASE("model: chunked prefill and decode give bitwise the full-sequence logits") {
    // fp32 storage (exact) and bf16 storage (rows rounded before anyone reads them).
    for (auto kv : {cache::kv_dtype::fp32, cache::kv_dtype::bf16}) {
        CAPTURE(cache::kv_dtype_name(kv));
        tiny_model tm(2, kv, kv == cache::kv_dtype::fp32 ? cache::index_k_dtype::fp32 : cache::index_k_dtype::bf16);
        const auto tokens = random_prompt(11, 140, tm.ss->m->config().vocab_size);
        const std::vector<float> full = run_chunked(*tm.ss, tokens, tokens.size());
        for (size_t chunk : {1, 3, 8, 17, 64}) {
            CAPTURE(chunk);
            CHECK(bitwise_equal(run_chunked(*tm.ss, tokens, chunk), full));
        }
    }
}

TEST_CASE("model: a sequence's logits do not depend on the batch or the thread count") {
    tiny_model tm(2);
    session& ss = *tm.ss;
    const int64_t vocab = ss.m->config().vocab_size;
    const auto a = random_prompt(21, 45, vocab), b = random_prompt(22, 30, vocab), c = random_prompt(23, 1, vocab);
    const std::vector<float> alone_a = run_chunked(ss, a, a.size());
    const std::vector<float> alone_b = run_chunked(ss, b, b.size());
    const std::vector<float> alone_c = run_chunked(ss, c, c.size());
    for (int order = 0; order < 2; ++order) {
        CAPTURE(order);
        auto sa = ss.new_sequence(), sb = ss.new_sequence(), sc = ss.new_sequence();
        std::vector<forward_item> items = {{a, 0, sa, logit_rows::all}, {b, 0, sb, logit_rows::all}, {c, 0, sc, logit_rows::all}};
        if (order == 1) std::swap(items[0], items[2]);
        auto out = ss.forward(items);
        REQUIRE(out.is_ok());
        CHECK(bitwise_equal(out->logits[order == 1 ? 2 : 0], alone_a));
        CHECK(bitwise_equal(out->logits[1], alone_b));
        CHECK(bitwise_equal(out->logits[order == 1 ? 0 : 2], alone_c));
        for (auto s : {sa, sb, sc}) ss.pool->free_sequence(s);
    }
    // A decode step batched with another sequence's prefill chunk.
    auto s1 = ss.new_sequence(), s2 = ss.new_sequence();
    ss.run(s1, std::span<const int32_t>(a.data(), a.size() - 1), 0, false);
    auto out = ss.forward({{b, 0, s2, logit_rows::last}, {std::span<const int32_t>(&a.back(), 1), int64_t(a.size() - 1), s1, logit_rows::last}});
    REQUIRE(out.is_ok());
    CHECK(std::memcmp(out->logits[1].data(), &alone_a[(a.size() - 1) * vocab], vocab * sizeof(float)) == 0);

    tiny_model one_thread(1);
    CHECK(bitwise_equal(run_chunked(*one_thread.ss, a, a.size()), alone_a));
}

TEST_CASE("model: a batched decode step of many sequences gives each the logits it gets alone") {
    // Twelve sequences at different positions (their compressors closing windows at different
    // steps) decode one token together: the compressors run sequence-parallel, the MoE gathers
    // in a pass, the mHC mixes run as a linear in jobs of rows per thread — none may change a bit
    // of any sequence's logits, with two threads or one.
    for (int threads : {2, 1}) {
        CAPTURE(threads);
        temp_dir dir{"batched_decode"};
        make_checkpoint("tiny", 3, dir.str());
        constexpr int n = 12;
        session ss(dir.str(), threads, cache::kv_dtype::bf16, cache::index_k_dtype::bf16, numerics_mode::hf,
                   int64_t{256} << 20, false, n + 1);
        const int64_t vocab = ss.m->config().vocab_size;
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < n; ++i) prompts.push_back(random_prompt(100 + i, 3 + 7 * i, vocab));
        std::vector<cache::slot_ref> seqs;
        std::vector<forward_item> step;
        for (int i = 0; i < n; ++i) {
            const auto& p = prompts[static_cast<size_t>(i)];
            seqs.push_back(ss.new_sequence());
            ss.run(seqs.back(), std::span<const int32_t>(p.data(), p.size() - 1), 0, false);
            step.push_back({std::span<const int32_t>(&p.back(), 1), int64_t(p.size() - 1), seqs.back(), logit_rows::last});
        }
        auto out = ss.forward(step);
        REQUIRE(out.is_ok());
        for (int i = 0; i < n; ++i) {
            CAPTURE(i);
            const auto& p = prompts[static_cast<size_t>(i)];
            const std::vector<float> alone = run_chunked(ss, p, p.size());
            REQUIRE(out->logits[static_cast<size_t>(i)].size() == static_cast<size_t>(vocab));
            CHECK(std::memcmp(out->logits[static_cast<size_t>(i)].data(), &alone[(p.size() - 1) * vocab],
                              vocab * sizeof(float)) == 0);
        }
        for (auto s : seqs) ss.pool->free_sequence(s);
    }
}

TEST_CASE("model: forward rejects bad batches with clear errors") {
    tiny_model tm(1);
    session& ss = *tm.ss;
    auto seq = ss.new_sequence();
    std::vector<int32_t> bad = {5, int32_t(ss.m->config().vocab_size)};
    auto out = ss.forward({{bad, 0, seq, logit_rows::last}});
    REQUIRE_FALSE(out.is_ok());
    CHECK(out.error().message().find("outside") != std::string::npos);
    // No pages for the positions: the caller skipped ensure_capacity.
    std::vector<int32_t> ok = {5};
    auto fresh = ss.new_sequence();
    forward_item far{ok, 1000, fresh, logit_rows::last};
    auto r = ss.m->forward(*ss.pool, std::span<const forward_item>(&far, 1));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().message().find("ensure_capacity") != std::string::npos);
    // A freed slot is stale.
    ss.pool->free_sequence(seq);
    forward_item stale{ok, 0, seq, logit_rows::last};
    CHECK_FALSE(ss.m->forward(*ss.pool, std::span<const forward_item>(&stale, 1)).is_ok());
}

TEST_CASE("model: exact indexer ties (one indexer head) still give chunk-invariant logits") {
    // With a single indexer head, ReLU zeroes half the scores, so exactly tied scores straddle
    // the top-k boundary all the time: the selection must still not depend on the chunking.
    auto cfg = preset_config("tiny");
    REQUIRE(cfg.is_ok());
    cfg->index_n_heads = 1;
    temp_dir dir("ties");
    make_model_options opt;
    opt.seed = 12;
    REQUIRE(write_random_checkpoint(*cfg, dir.str(), opt).is_ok());
    session ss(dir.str(), 2);
    const auto tokens = random_prompt(31, 120, cfg->vocab_size);
    const std::vector<float> full = run_chunked(ss, tokens, tokens.size());
    for (size_t chunk : {1, 5, 33}) {
        CAPTURE(chunk);
        CHECK(bitwise_equal(run_chunked(ss, tokens, chunk), full));
    }
}

TEST_CASE("model: a lone query's indexer scoring and row decoding split over the threads give bitwise the logits of one thread") {
    // A decode step of one sequence (or a prefill of fewer blocks than threads) splits the
    // indexer's key chunks over the threads, and the decoding of the compressed rows it selected;
    // a full prefill gives each thread whole blocks, one thread does everything in order. At 403
    // tokens a CSA layer of `tiny` holds 100 compressed rows (4 chunks of 32, the last partial)
    // against a top-4, an HCA layer 25 rows (two pieces of decoding): every decode step below runs
    // them split, the full prefill unsplit, and all must agree bit for bit — with bf16 rows too,
    // decoded on whichever thread reads them.
    temp_dir dir{"split_indexer"};
    make_checkpoint("tiny", 3, dir.str());
    for (auto ik : {cache::index_k_dtype::fp32, cache::index_k_dtype::bf16}) {
        CAPTURE(static_cast<int>(ik));
        std::vector<float> reference;
        for (int threads : {1, 2, 3}) {
            CAPTURE(threads);
            session ss(dir.str(), threads, ik == cache::index_k_dtype::fp32 ? cache::kv_dtype::fp32 : cache::kv_dtype::bf16,
                       ik);
            const auto t = random_prompt(41, 403, ss.m->config().vocab_size);
            // Prefill 395 tokens at once, then 8 lone decode steps (split scoring with 2 or 3 threads).
            auto seq = ss.new_sequence();
            std::vector<float> got = ss.run(seq, std::span<const int32_t>(t.data(), 395), 0, true);
            for (size_t at = 395; at < t.size(); ++at) {
                auto row = ss.run(seq, std::span<const int32_t>(&t[at], 1), int64_t(at), true);
                got.insert(got.end(), row.begin(), row.end());
            }
            ss.pool->free_sequence(seq);
            REQUIRE(got.size() == t.size() * static_cast<size_t>(ss.m->config().vocab_size));
            if (reference.empty()) reference = got;
            else CHECK(bitwise_equal(got, reference));
            CHECK(bitwise_equal(run_chunked(ss, t, t.size()), reference));
        }
    }
}

TEST_CASE("model: a model sharing another's weights holds no copy, gives bitwise its logits side by side, and outlives it") {
    // pd with role both: the decode engine's model shares the prefill engine's weights, and both
    // forward at once on their own scheduler threads.
    tiny_model tm(2);
    const auto a = random_prompt(41, 70, tm.ss->m->config().vocab_size);
    const auto b = random_prompt(42, 33, tm.ss->m->config().vocab_size);
    const std::vector<float> alone_a = run_chunked(*tm.ss, a, a.size()), alone_b = run_chunked(*tm.ss, b, 5);

    session other(tm.dir.str(), 2);
    other.m = tm.ss->m->sharing_weights();
    CHECK(&other.m->memory() == &tm.ss->m->memory());  // one set of weights
    CHECK(other.m->config().vocab_size == tm.ss->m->config().vocab_size);

    // Both models at once, each on its own thread with its own pool, several times over.
    bool first_ok = true, second_ok = true;
    std::thread t([&] {
        for (int i = 0; i < 3; ++i) first_ok = first_ok && bitwise_equal(run_chunked(*tm.ss, a, 9), alone_a);
    });
    for (int i = 0; i < 3; ++i) second_ok = second_ok && bitwise_equal(run_chunked(other, b, b.size()), alone_b);
    t.join();
    CHECK(first_ok);
    CHECK(second_ok);

    // The weights stay while any model uses them.
    tm.ss->m.reset();
    CHECK(bitwise_equal(run_chunked(other, a, 17), alone_a));
}
