// The host tier in the engine, on the real tiny model (prefix-cache.md §9 T5, T6):
//   T6  sessions with a tiny pool and a host tier: device evictions keep host copies, hits load
//       them back, and every token and logprob equals cache off;
//   T5  a hit whose pages were evicted to host, loaded under an injected delay on index-K first,
//       then on each kind and on each layer, with sentinel-filled destinations checked before
//       attention: the same tokens as cache off every time. With the test-only skip-gate switch
//       the sentinel check fires and fails the request (naming layer and kind); the cache stays
//       usable and correct afterwards.
#include <doctest/doctest.h>

#include <algorithm>

#include "cache/host_tier.h"
#include "engine/cpu_engine.h"
#include "engine/prefix_cache.h"
#include "engine_test_util.h"
#include "prefix_sessions.h"
#include "tiny_checkpoint.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config host_config(const std::string& dir, int64_t pool_bytes) {
    config c = cache_config(dir, true, 2048, pool_bytes);
    c.scheduler.max_running_requests = 4;
    c.cache.host_memory_bytes = int64_t{32} << 20;
    return c;
}

// An engine built from its parts, so the test keeps the prefix cache (its host tier's test hooks).
struct host_engine {
    std::shared_ptr<prefix_cache> prefix;
    std::unique_ptr<scheduler> sched;
    explicit host_engine(const config& c) {
        auto parts = make_cpu_engine_parts(c);
        REQUIRE_MESSAGE(parts, parts.error().message());
        REQUIRE(parts->prefix);
        REQUIRE(parts->prefix->host() != nullptr);
        prefix = parts->prefix;
        scheduler_options so = scheduler_options_from(c, nullptr);
        so.prefix = parts->prefix;
        sched = std::make_unique<scheduler>(std::move(parts->executor), std::move(parts->cap), std::move(so));
    }
};

sampling_params greedy(int64_t n) {
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = n;
    p.ignore_eos = true;
    p.logprobs = 2;
    return p;
}

turn_result run_one(tandem::engine::engine& eng, const std::vector<int32_t>& prompt, int64_t n,
                    status* error = nullptr) {
    collector col;
    REQUIRE(eng.submit({prompt, greedy(n), col.sink(), ""}));
    REQUIRE(col.wait_final(120000));
    if (error != nullptr) *error = col.last.error;
    return {col.tokens, col.logprobs};
}

}  // namespace

TEST_CASE("host tier: T6 sessions in a tiny pool round-trip through host memory and equal cache off") {
    tiny_checkpoint ckpt;
    config off_cfg = host_config(ckpt.dir.string(), 700 * 1024);
    off_cfg.cache.prefix_cache = false;
    auto off = make_cpu_engine(off_cfg);
    REQUIRE_MESSAGE(off, off.error().message());
    const auto expected = run_sessions(**off, 5, false);
    config on_cfg = host_config(ckpt.dir.string(), 700 * 1024);
    on_cfg.cache.test_host_evict_on_release = true;  // every hit loads from host memory
    auto on = make_cpu_engine(on_cfg);
    REQUIRE_MESSAGE(on, on.error().message());
    const auto got = run_sessions(**on, 5, false);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i] == expected[i]);
    }
    const engine_stats s = (*on)->stats();
    INFO("pages ", s.pages_total, " evicted to host ", s.prefix.evicted_to_host, " loaded ",
         s.prefix.host_loaded_pages, " hits ", s.prefix.hit_tokens);
    CHECK(s.prefix.host_enabled);
    CHECK(s.prefix.evicted_to_host > 0);     // the pool was too small: device copies went
    CHECK(s.prefix.host_loaded_pages > 0);   // ... and hits loaded them back
    CHECK(s.prefix.host_bytes_used > 0);
    CHECK(s.prefix.host_load_seconds.count > 0);
    CHECK(s.prefix.restore_failures == 0);
    CHECK(s.pages_free + s.prefix.cached_pages == s.pages_total);
}

TEST_CASE("host tier: T5 loads under delays on each kind and layer give cache-off tokens; skip-gate fires the sentinel") {
    tiny_checkpoint ckpt;
    const int64_t pool_bytes = 700 * 1024;
    config off_cfg = host_config(ckpt.dir.string(), pool_bytes);
    off_cfg.cache.prefix_cache = false;
    const int32_t vocab = 5000;
    const auto turn1 = make_prompt(41, 3 * 128 + 40, vocab);
    std::vector<int32_t> turn2;
    turn_result expected;
    {
        auto off = make_cpu_engine(off_cfg);
        REQUIRE_MESSAGE(off, off.error().message());
        const turn_result first = run_one(**off, turn1, 6);
        turn2 = turn1;
        turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
        const auto msg = make_prompt(42, 30, vocab);
        turn2.insert(turn2.end(), msg.begin(), msg.end());
        expected = run_one(**off, turn2, 6);
    }
    host_engine he(host_config(ckpt.dir.string(), pool_bytes));
    tandem::engine::engine& eng = *he.sched;
    // Every request end evicts the pool's cached copies to host, so each turn-2 run below hits
    // pages that only the host tier holds and loads them back under the hooks.
    he.prefix->host()->set_test_hooks({"", -1, 0, false, false, true});
    run_one(eng, turn1, 6);  // caches turn 1 (prompt-end snapshot + its pages, written through)
    const int64_t layers = he.prefix->host()->geometry().layout().num_layers();
    auto evict_then_hit = [&](cache::host_tier_test_hooks hooks, status* error) {
        const int64_t loaded = eng.stats().prefix.host_loaded_pages;
        hooks.evict_on_release = true;
        he.prefix->host()->set_test_hooks(std::move(hooks));
        turn_result got = run_one(eng, turn2, 6, error);
        return std::make_pair(got, eng.stats().prefix.host_loaded_pages - loaded);
    };
    std::vector<cache::host_tier_test_hooks> cases;
    cases.push_back({"index_k", -1, 30, true, false, true});  // the #22811 kind first
    for (const char* kind : {"compressed_kv", "window", "attn_compressor", "index_compressor"})
        cases.push_back({kind, -1, 30, true, false, true});
    for (int32_t l = 0; l < layers; ++l) cases.push_back({"", l, 30, true, false, true});
    for (const cache::host_tier_test_hooks& h : cases) {
        CAPTURE(h.delay_kind);
        CAPTURE(h.delay_layer);
        status error;
        const int64_t hits_before = eng.stats().prefix.hit_tokens;
        auto [got, loaded] = evict_then_hit(h, &error);
        INFO("hit tokens ", eng.stats().prefix.hit_tokens - hits_before, " pages held ",
             eng.stats().prefix.cached_pages, " free ", eng.stats().pages_free);
        REQUIRE_MESSAGE(error.is_ok(), error.message());
        CHECK(loaded > 0);  // the hit really came from host memory
        CHECK(got == expected);
    }
    SUBCASE("skip-gate: the sentinel check fires, the request fails, the cache stays correct") {
        status error;
        // The copy thread stops before its first copy (every kind of layer 0), so the skipped
        // gate reads only sentinels the scheduler thread wrote: the outcome is certain, and the
        // test does not race the copy thread's writes (which TSan rightly reports).
        auto [got, loaded] = evict_then_hit({"", 0, 60000, true, true, true}, &error);
        (void)loaded;
        REQUIRE_FALSE(error.is_ok());
        CHECK(error.message().find("host-tier sentinel: layer 0 ") != std::string::npos);
        CHECK(got.tokens.empty());
        status again;
        auto [ok, loaded_again] = evict_then_hit({}, &again);
        REQUIRE_MESSAGE(again.is_ok(), again.message());
        CHECK(ok == expected);
    }
    const engine_stats s = eng.stats();
    CHECK(s.prefix.restore_failures == 0);
}

// Two requests admitted together share the pages one of them is loading from host (the second
// matched them while the first's load was still copying). The first is aborted before its first
// step. Its load must still land for the second: cancelling it would fail the second request's
// step — and every request batched with it — over someone else's abort.
TEST_CASE("host tier: an abort does not cancel a load another admitted request waits on") {
    tiny_checkpoint ckpt;
    const auto turn1 = make_prompt(51, 3 * 128 + 40, 5000);
    auto turn2 = turn1;
    const auto msg = make_prompt(52, 30, 5000);
    turn2.insert(turn2.end(), msg.begin(), msg.end());
    config c = host_config(ckpt.dir.string(), 700 * 1024);
    c.cache.host_load_timeout_ms = 60000;
    std::shared_ptr<prefix_cache> prefix;
    std::shared_ptr<pool_sequences> seqs;
    {
        auto parts = make_cpu_engine_parts(c);
        REQUIRE_MESSAGE(parts, parts.error().message());
        prefix = parts->prefix;
        seqs = parts->sequences;
        scheduler_options so = scheduler_options_from(c, nullptr);
        so.prefix = parts->prefix;
        scheduler sched(std::move(parts->executor), std::move(parts->cap), std::move(so));
        prefix->host()->set_test_hooks({"", -1, 0, false, false, true});  // evict to host on release
        run_one(sched, turn1, 6);
    }  // the scheduler is gone: this thread now drives the cache as the scheduler would
    REQUIRE(prefix->stats().evicted_to_host > 0);
    // The copy thread waits 300 ms before each kind of layer 0, so the first load is still
    // copying when the abort releases it.
    prefix->host()->set_test_hooks({"", 0, 300, true, false, false});
    auto admit = [&](request_id id) {
        auto r = std::make_unique<request>();
        r->id = id;
        r->prompt = turn2;
        auto seq = seqs->create();
        REQUIRE(seq);
        r->sequence = *seq;
        r->computed = prefix->attach(*r);
        return r;
    };
    auto first = admit(1);
    auto second = admit(2);
    REQUIRE(first->computed > 0);
    REQUIRE(second->computed == first->computed);
    const auto* waits = seqs->loads(second->sequence);
    REQUIRE(waits != nullptr);
    std::vector<const cache::load_ticket*> distinct;
    for (const auto& t : *waits)
        if (std::find(distinct.begin(), distinct.end(), t.get()) == distinct.end()) distinct.push_back(t.get());
    REQUIRE(distinct.size() == 2);  // the first request's load (shared pages) and its own
    const int64_t loaded_before = prefix->stats().host_loaded_pages;

    prefix->release(*first, false);  // aborted before its first step
    seqs->destroy(first->sequence);
    const cache::layer_gate gate(seqs->pool(), *waits, 60000);
    for (int32_t l = 0; l < seqs->pool().layout().num_layers(); ++l) {
        auto view = gate.wait(l);
        REQUIRE_MESSAGE(view.is_ok(), view.error().message());
    }
    CHECK(prefix->stats().host_loaded_pages > loaded_before);
    prefix->after_step(*second);
    prefix->release(*second, false);
    seqs->destroy(second->sequence);
    CHECK(prefix->locked_nodes() == 0);
    prefix->tree().check_integrity();
}
