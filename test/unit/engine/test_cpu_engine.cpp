// The engine over the real CPU model (a generated tiny checkpoint) and the real page pool.
#include <doctest/doctest.h>

#include <deque>
#include <filesystem>

#include "cache/plan_command.h"
#include "engine/cpu_engine.h"
#include "core/config_test_helpers.h"
#include "engine_test_util.h"
#include "tiny_checkpoint.h"
#include "model/make_model.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config engine_config(const std::string& model_dir, int64_t prefill_tokens) {
    auto cfg = load_config({});
    REQUIRE(cfg);
    config c = *cfg;
    c.model.path = model_dir;
    c.backend.threads = 2;
    c.cache.memory_bytes = int64_t{64} << 20;
    c.scheduler.max_running_requests = 8;
    c.scheduler.max_prefill_tokens = prefill_tokens;
    testing::no_verify(c);
    return c;
}

std::vector<std::vector<int32_t>> generate(tandem::engine::engine& eng,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const sampling_params& p, bool together) {
    std::deque<collector> cols(prompts.size());
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts.size(); ++i) {
        REQUIRE(eng.submit({prompts[i], p, cols[i].sink(), ""}));
        if (!together) REQUIRE(cols[i].wait_final(60000));
    }
    for (auto& c : cols) {
        REQUIRE(c.wait_final(60000));
        CHECK(c.finals == 1);
        CHECK(c.last.reason != finish_reason::error);
        out.push_back(c.tokens);
    }
    return out;
}

}  // namespace

TEST_CASE("cpu engine: batched and chunked greedy generation equals one-at-a-time") {
    tiny_checkpoint ckpt;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 5; ++i) prompts.push_back(make_prompt(uint64_t(i), 3 + i * 9, 200));
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 6;
    p.ignore_eos = true;

    liveness_registry reg;
    auto alone_eng = make_cpu_engine(engine_config(ckpt.dir.string(), 2048), &reg);
    REQUIRE_MESSAGE(alone_eng, alone_eng.error().message());
    tandem::engine::engine& e1 = **alone_eng;
    CHECK(e1.vocab_size() > 200);
    const auto alone = generate(e1, prompts, p, false);
    for (const auto& t : alone) CHECK(t.size() == 6);
    const engine_stats s1 = e1.stats();
    CHECK(s1.pages_total > 0);
    CHECK(s1.pages_free == s1.pages_total);  // every page back in the pool
    CHECK_FALSE(reg.problem(60000));

    for (int64_t chunk : {3, 16}) {
        CAPTURE(chunk);
        auto eng = make_cpu_engine(engine_config(ckpt.dir.string(), chunk));
        REQUIRE(eng);
        CHECK(generate(**eng, prompts, p, true) == alone);
        CHECK((*eng)->stats().pages_free == (*eng)->stats().pages_total);
    }
}

TEST_CASE("cpu engine: preemption in a 3-page pool gives the same greedy tokens") {
    tiny_checkpoint ckpt;
    config c = engine_config(ckpt.dir.string(), 64);
    c.cache.page_size = 128;
    c.scheduler.max_running_requests = 4;
    // A budget of exactly 4 sequence slots + 3 pages.
    c.cache.memory_bytes = tiny_pool_bytes_for(c, 4, 3);

    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) prompts.push_back(make_prompt(uint64_t(40 + i), 118 + i, 200));
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 14;  // every request crosses into its second page
    p.ignore_eos = true;
    auto eng = make_cpu_engine(c);
    REQUIRE_MESSAGE(eng, eng.error().message());
    REQUIRE((*eng)->stats().pages_total == 3);
    const auto alone = generate(**eng, prompts, p, false);
    CHECK((*eng)->stats().preemptions == 0);
    const auto together = generate(**eng, prompts, p, true);
    CHECK(together == alone);
    CHECK((*eng)->stats().preemptions > 0);
    // Every page is free or held by the prefix cache (decode tails crossed into page 2).
    CHECK((*eng)->stats().pages_free + (*eng)->stats().prefix.cached_pages == 3);
}

TEST_CASE("cpu engine: a missing model directory is a clear error") {
    config c = engine_config("/nonexistent/tandem-model", 64);
    auto eng = make_cpu_engine(c);
    REQUIRE_FALSE(eng);
    CHECK(eng.error().message().find("/nonexistent/tandem-model") != std::string::npos);
}
