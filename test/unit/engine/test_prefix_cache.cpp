// The prefix cache in the engine, on the real tiny model: multi-turn sessions, regenerate and
// branches give bitwise the tokens and logprobs of cache off (prefix-cache.md §9), under any
// chunk size, with preemption in a tiny pool, and with seeded sampling; the cache is really used
// (hit tokens), flush is refused while requests hold cache state, and nothing leaks.
#include <doctest/doctest.h>

#include <cstring>
#include <deque>
#include <future>

#include "engine/cpu_engine.h"
#include "engine_test_util.h"
#include "tiny_checkpoint.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config cache_config(const std::string& model_dir, bool prefix, int64_t chunk = 2048,
                    int64_t memory = int64_t{64} << 20) {
    auto cfg = load_config({});
    REQUIRE(cfg);
    config c = *cfg;
    c.model.path = model_dir;
    c.backend.threads = 2;
    c.cache.memory_bytes = memory;
    c.cache.page_size = 128;
    c.cache.prefix_cache = prefix;
    c.cache.snapshot_interval_tokens = 256;
    c.scheduler.max_running_requests = 8;
    c.scheduler.max_prefill_tokens = chunk;
    // A randomly sampled shadow check borrows pool pages after the final event: off, so the
    // page accounting below is exact.
    c.verify.sample_rate = 0;
    return c;
}

struct turn_result {
    std::vector<int32_t> tokens;
    std::vector<position_logprobs> logprobs;
    bool operator==(const turn_result& o) const {
        if (tokens != o.tokens || logprobs.size() != o.logprobs.size()) return false;
        for (size_t i = 0; i < logprobs.size(); ++i) {
            const auto& a = logprobs[i];
            const auto& b = o.logprobs[i];
            if (a.chosen.token != b.chosen.token ||
                std::memcmp(&a.chosen.logprob, &b.chosen.logprob, sizeof(float)) != 0 ||
                a.top.size() != b.top.size())
                return false;
            for (size_t k = 0; k < a.top.size(); ++k)
                if (a.top[k].token != b.top[k].token ||
                    std::memcmp(&a.top[k].logprob, &b.top[k].logprob, sizeof(float)) != 0)
                    return false;
        }
        return true;
    }
};

// A seeded agent-like workload: sessions sharing a system prompt, each turn's prompt = the
// previous prompt + its output + a new message; a regenerate and a branch of turn 2; several
// sessions in flight together.
std::vector<turn_result> run_sessions(tandem::engine::engine& eng, uint64_t seed, bool sampled) {
    const int32_t vocab = 5000;
    const std::vector<int32_t> system = make_prompt(seed, 170, vocab);
    sampling_params p;
    p.temperature = sampled ? 0.8 : 0.0;
    p.seed = seed;
    p.max_tokens = 45;
    p.ignore_eos = true;
    p.logprobs = 2;
    std::vector<turn_result> results;
    const int sessions = 3;
    std::vector<std::vector<int32_t>> history(sessions, system);
    for (int turn = 0; turn < 3; ++turn) {
        std::deque<collector> cols(sessions + 2);
        std::vector<std::vector<int32_t>> prompts;
        for (int s = 0; s < sessions; ++s) {
            auto msg = make_prompt(seed * 100 + uint64_t(s * 10 + turn), 30 + 17 * s, vocab);
            history[s].insert(history[s].end(), msg.begin(), msg.end());
            prompts.push_back(history[s]);
        }
        if (turn == 1) {
            prompts.push_back(history[0]);  // regenerate session 0's turn
            auto branch = history[1];
            branch.resize(branch.size() - 5);
            auto alt = make_prompt(seed + 777, 20, vocab);
            branch.insert(branch.end(), alt.begin(), alt.end());
            prompts.push_back(branch);      // a branch of session 1
        }
        for (size_t i = 0; i < prompts.size(); ++i) REQUIRE(eng.submit({prompts[i], p, cols[i].sink(), ""}));
        for (size_t i = 0; i < prompts.size(); ++i) {
            REQUIRE(cols[i].wait_final(120000));
            REQUIRE(cols[i].last.reason == finish_reason::length);
            results.push_back({cols[i].tokens, cols[i].logprobs});
            if (i < size_t(sessions)) {
                history[i].insert(history[i].end(), cols[i].tokens.begin(), cols[i].tokens.end());
            }
        }
    }
    return results;
}

}  // namespace

TEST_CASE("prefix cache: multi-turn sessions, regenerate and branches equal cache off, bitwise") {
    tiny_checkpoint ckpt;
    for (bool sampled : {false, true}) {
        CAPTURE(sampled);
        auto off = make_cpu_engine(cache_config(ckpt.dir.string(), false));
        REQUIRE_MESSAGE(off, off.error().message());
        const auto expected = run_sessions(**off, 11, sampled);
        CHECK((*off)->stats().prefix.enabled == false);
        for (int64_t chunk : sampled ? std::vector<int64_t>{2048} : std::vector<int64_t>{2048, 37}) {
            CAPTURE(chunk);
            auto on = make_cpu_engine(cache_config(ckpt.dir.string(), true, chunk));
            REQUIRE(on);
            const auto got = run_sessions(**on, 11, sampled);
            REQUIRE(got.size() == expected.size());
            for (size_t i = 0; i < got.size(); ++i) {
                CAPTURE(i);
                CHECK(got[i] == expected[i]);
            }
            const engine_stats s = (*on)->stats();
            CHECK(s.prefix.enabled);
            // Turns 2 and 3 resume from turn 1's decode tail and prompt-end snapshots.
            CHECK(s.prefix.hit_tokens >= 8 * 128);
            CHECK(s.prefix.snapshots > 0);
            CHECK(s.prefix.restore_failures == 0);
            CHECK(s.pages_free + s.prefix.cached_pages == s.pages_total);
        }
    }
}

TEST_CASE("prefix cache: preemption in a tiny pool with the cache on gives the tokens of cache off") {
    tiny_checkpoint ckpt;
    // A pool of a handful of pages: requests preempt each other and the cache must give pages back.
    auto plan_budget = [&](bool prefix) {
        config c = cache_config(ckpt.dir.string(), prefix, 64, 700 * 1024);
        c.scheduler.max_running_requests = 4;
        return c;
    };
    auto off = make_cpu_engine(plan_budget(false));
    REQUIRE_MESSAGE(off, off.error().message());
    const auto expected = run_sessions(**off, 5, false);
    auto on = make_cpu_engine(plan_budget(true));
    REQUIRE(on);
    const auto got = run_sessions(**on, 5, false);
    CHECK(got == expected);
    const engine_stats s = (*on)->stats();
    INFO("pages ", s.pages_total, " preemptions ", s.preemptions, " evicted ", s.prefix.evicted_pages);
    CHECK(s.preemptions > 0);
    CHECK(s.prefix.evicted_pages > 0);  // the pool was too small to keep everything
    CHECK(s.prefix.hit_tokens > 0);
}

TEST_CASE("prefix cache: a branch point gets a snapshot, so the next sibling resumes there") {
    tiny_checkpoint ckpt;
    config c = cache_config(ckpt.dir.string(), true);
    c.cache.snapshot_interval_tokens = 0;  // only prompt ends, decode tails and branch points
    auto on = make_cpu_engine(c);
    REQUIRE(on);
    tandem::engine::engine& eng = **on;
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 2;
    p.ignore_eos = true;
    const auto trunk = make_prompt(9, 2 * 128, 5000);
    auto with_tail = [&](uint64_t key, int64_t n) {
        auto t = trunk;
        auto tail = make_prompt(key, n, 5000);
        t.insert(t.end(), tail.begin(), tail.end());
        return t;
    };
    auto run = [&](const std::vector<int32_t>& prompt) {
        collector col;
        REQUIRE(eng.submit({prompt, p, col.sink(), ""}));
        REQUIRE(col.wait_final(60000));
        return eng.stats().prefix.hit_tokens;
    };
    CHECK(run(with_tail(1, 150)) == 0);  // snapshot at its prompt end, 3 pages
    CHECK(run(with_tail(2, 150)) == 0);  // shares 2 pages of history, no snapshot there: computes
                                         // them, and snapshots the branch point (2 pages)
    CHECK(run(with_tail(3, 150)) == 2 * 128);  // resumes at the branch point
}

TEST_CASE("prefix cache: flush is refused while a request holds cache state, then frees every page") {
    tiny_checkpoint ckpt;
    auto on = make_cpu_engine(cache_config(ckpt.dir.string(), true));
    REQUIRE(on);
    tandem::engine::engine& eng = **on;
    auto flush = [&] {
        auto done = std::make_shared<std::promise<result<int64_t>>>();
        auto fut = done->get_future();
        eng.flush_prefix_cache([done](result<int64_t> r) { done->set_value(std::move(r)); });
        REQUIRE(fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
        return fut.get();
    };
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 1000;
    p.ignore_eos = true;
    collector c;
    auto id = eng.submit({make_prompt(3, 300, 5000), p, c.sink(), ""});
    REQUIRE(id);
    REQUIRE(c.wait_tokens(2, 60000));
    result<int64_t> refused = flush();
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.error().code() == error_code::unavailable);
    eng.abort(*id);
    REQUIRE(c.wait_final(60000));
    CHECK(c.last.reason == finish_reason::aborted);
    // The aborted request's prompt-end snapshot stays in the cache until the flush.
    CHECK(eng.stats().prefix.cached_pages > 0);
    result<int64_t> freed = flush();
    REQUIRE_MESSAGE(freed, freed.error().message());
    CHECK(*freed > 0);
    const engine_stats s = eng.stats();
    CHECK(s.prefix.cached_pages == 0);
    CHECK(s.prefix.snapshots == 0);
    CHECK(s.pages_free == s.pages_total);

    auto off = make_cpu_engine(cache_config(ckpt.dir.string(), false));
    REQUIRE(off);
    auto done = std::make_shared<std::promise<result<int64_t>>>();
    (*off)->flush_prefix_cache([done](result<int64_t> r) { done->set_value(std::move(r)); });
    CHECK(done->get_future().get().error().code() == error_code::invalid_argument);
}
