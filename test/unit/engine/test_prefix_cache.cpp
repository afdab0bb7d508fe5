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
#include "prefix_sessions.h"
#include "tiny_checkpoint.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;


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
        REQUIRE(col.wait_final(k_model_wait_ms));
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
    REQUIRE(c.wait_tokens(2, k_model_wait_ms));
    result<int64_t> refused = flush();
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.error().code() == error_code::unavailable);
    eng.abort(*id);
    REQUIRE(c.wait_final(k_model_wait_ms));
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
