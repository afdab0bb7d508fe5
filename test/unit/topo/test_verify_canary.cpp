// Shadow verification (engine/verifier.h) on the real tiny model: fault-free runs — batched,
// sampled, preempted, pd over inproc and tcp — report 0 divergences; state corrupted after its
// checksum verified (verify.fault_corrupt_kind) is caught at path pd_transfer and at the first
// position the decode engine computed from it; checks that cannot run are counted by reason.
#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <thread>

#include "cache/plan_command.h"
#include "engine/cpu_engine.h"
#include "model/make_model.h"
#include "engine/engine_test_util.h"
#include "engine/tiny_checkpoint.h"
#include "topo/deployment.h"
#include "topo/deployment_test_config.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config canary_config(const std::string& model_dir) {
    config c = tandem::test::deployment_test_config(model_dir);
    c.verify.sample_rate = 1.0;
    c.verify.max_inflight = 64;
    c.verify.max_tokens_per_second = 0;
    c.verify.max_chunk_tokens = 16;  // several chunks per check: restarts and chunk edges run
    return c;
}

using deployed = tandem::test::healthy_deployment;

// Submits every prompt at once and waits for every final event.
void run_all(tandem::engine::engine& eng, const std::vector<std::vector<int32_t>>& prompts,
             const sampling_params& p) {
    std::deque<collector> cols(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto id = eng.submit({prompts[i], p, cols[i].sink(), "canary-" + std::to_string(i)});
        REQUIRE_MESSAGE(id, id.error().message());
    }
    for (auto& c : cols) {
        REQUIRE(c.wait_final(120000));
        CHECK_MESSAGE(c.last.reason != finish_reason::error, c.last.error.message());
    }
}

// Waits until `sampled` requests were sampled and nothing is left to check (bounded by work,
// not by time: the deadline only catches a verifier that stopped making progress).
verify_report settled(tandem::engine::engine& eng, int64_t sampled) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
        verify_report v = eng.verification();
        if ((v.sampled >= sampled && v.inflight == 0) || std::chrono::steady_clock::now() > until) {
            return v;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

int64_t skipped_total(const verify_report& v) {
    int64_t n = 0;
    for (int64_t s : v.skipped) n += s;
    return n;
}

std::vector<std::vector<int32_t>> prompts_of(std::initializer_list<int64_t> lengths, uint64_t key) {
    std::vector<std::vector<int32_t>> out;
    for (int64_t n : lengths) out.push_back(make_prompt(key++, n, 5000));
    return out;
}

sampling_params greedy(int64_t max_tokens) {
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

}  // namespace

TEST_CASE("verify: fault-free single topology, batched and sampled: every check agrees") {
    tiny_checkpoint ckpt(31);
    deployed single(canary_config(ckpt.dir.string()));
    const auto prompts = prompts_of({1, 5, 17, 40, 129, 260}, 500);
    run_all(single.eng(), prompts, greedy(7));
    sampling_params seeded = greedy(5);
    seeded.temperature = 0.9;
    seeded.top_p = 0.95;
    seeded.seed = 77;
    seeded.repetition_penalty = 1.1;
    run_all(single.eng(), prompts, seeded);
    const verify_report v = settled(single.eng(), 12);
    CHECK(v.sampled == 12);
    CHECK(v.checks == 12);
    CHECK(skipped_total(v) == 0);
    CHECK(v.total_divergences() == 0);
    CHECK(v.last_divergence.empty());
    int64_t fed = 0;  // each check feeds prompt + output minus the last token
    for (const auto& p : prompts) fed += 2 * static_cast<int64_t>(p.size()) + 7 - 1 + 5 - 1;
    CHECK(v.tokens_recomputed == fed);
}

TEST_CASE("verify: preempted requests (recomputed mid-generation) still check clean") {
    tiny_checkpoint ckpt(32);
    config c = canary_config(ckpt.dir.string());
    c.scheduler.max_running_requests = 4;
    // Exactly 4 sequence slots + 3 pages of 128 tokens; four requests of ~130 tokens need 8.
    c.cache.memory_bytes = tiny_pool_bytes_for(c, 4, 3);
    auto eng = make_cpu_engine(c);
    REQUIRE_MESSAGE(eng, eng.error().message());
    REQUIRE((*eng)->stats().pages_total == 3);
    run_all(**eng, prompts_of({118, 119, 120, 121}, 600), greedy(14));
    const verify_report v = settled(**eng, 4);
    CHECK((*eng)->stats().preemptions > 0);
    CHECK(v.checks == 4);
    CHECK(v.total_divergences() == 0);
}

TEST_CASE("verify: fault-free pd over inproc and tcp reports 0 divergences") {
    tiny_checkpoint ckpt(33);
    for (const char* kind : {"inproc", "tcp"}) {
        CAPTURE(kind);
        config c = canary_config(ckpt.dir.string());
        c.topology.mode = "pd";
        c.transport.kind = kind;
        deployed pd(c);
        const auto prompts = prompts_of({3, 20, 130, 300}, 700);
        run_all(pd.eng(), prompts, greedy(6));
        sampling_params seeded = greedy(4);
        seeded.temperature = 1.0;
        seeded.seed = 5;
        run_all(pd.eng(), prompts, seeded);  // position 0 is re-sampled from the recomputed row
        const verify_report v = settled(pd.eng(), 8);
        CHECK(v.checks == 8);
        CHECK(v.total_divergences() == 0);
    }
}

TEST_CASE("verify: state corrupted after its checksum verified is caught at pd_transfer, position 1") {
    tiny_checkpoint ckpt(34);
    // window: the ring every next token attends to; compressed_kv: HCA layers (ratio 16 in
    // tiny) read every compressed row, so prompts of >= 16 tokens read corrupted rows at once.
    for (const char* kind : {"window", "compressed_kv"}) {
        CAPTURE(kind);
        config c = canary_config(ckpt.dir.string());
        c.topology.mode = "pd";
        c.transport.kind = "inproc";
        c.verify.fault_corrupt_kind = kind;
        deployed pd(c);
        const auto prompts = prompts_of({20, 47, 150}, 800);
        run_all(pd.eng(), prompts, greedy(5));
        const verify_report v = settled(pd.eng(), 3);
        CHECK(v.checks == 3);
        CHECK(v.divergences[static_cast<size_t>(verify_path::pd_transfer)] == 3);
        CHECK(v.total_divergences() == 3);
        // Position 0 was sampled by the prefill engine from its own, intact state; position 1 is
        // the first row the decode engine computed from what landed.
        CHECK(v.last_position == 1);
        CHECK(v.last_path == verify_path::pd_transfer);
        CHECK(v.last_divergence.find("pd_transfer") != std::string::npos);
        CHECK(v.last_divergence.find(kind) != std::string::npos);  // the kinds it read
        CHECK(v.last_divergence.find("canary-") != std::string::npos);  // the request id
    }
}

TEST_CASE("verify: checks that cannot run are counted by reason, never dropped") {
    tiny_checkpoint ckpt(35);
    config c = canary_config(ckpt.dir.string());
    SUBCASE("budget: a 10-token bucket cannot pay for 40-token recomputes") {
        c.verify.max_tokens_per_second = 1;
        deployed single(c);
        run_all(single.eng(), prompts_of({40, 41}, 900), greedy(3));
        const verify_report v = settled(single.eng(), 2);
        CHECK(v.skipped[static_cast<size_t>(verify_skip::budget)] == 2);
        CHECK(v.checks == 0);
    }
    SUBCASE("unfinished: an aborted request has nothing complete to compare") {
        deployed single(c);
        collector col;
        auto id = single.eng().submit({make_prompt(1, 8, 5000), greedy(1000), col.sink(), ""});
        REQUIRE(id);
        single.eng().abort(*id);
        REQUIRE(col.wait_final());
        const verify_report v = settled(single.eng(), 1);
        CHECK(v.sampled == 1);
        CHECK(v.skipped[static_cast<size_t>(verify_skip::unfinished)] ==
              (col.last.reason == finish_reason::aborted ? 1 : 0));
    }
    SUBCASE("inflight: with room for one check, requests ending together skip the rest") {
        c.verify.max_inflight = 1;
        auto parts = make_cpu_engine_parts(c);
        REQUIRE(parts);
        // The first step waits until all four requests are in the inbox, so they are admitted,
        // decode and finish in the same steps: one check is queued, three are skipped.
        std::mutex mu;
        std::condition_variable cv;
        bool go = false;
        scheduler_options so = scheduler_options_from(c, nullptr);
        so.before_step = [&](uint64_t) {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return go; });
        };
        scheduler eng(std::move(parts->executor), std::move(parts->cap), so);
        std::deque<collector> cols(4);
        const auto prompts = prompts_of({10, 10, 10, 10}, 950);
        for (size_t i = 0; i < 4; ++i) REQUIRE(eng.submit({prompts[i], greedy(3), cols[i].sink(), ""}));
        {
            std::lock_guard lock(mu);
            go = true;
        }
        cv.notify_all();
        for (auto& col : cols) REQUIRE(col.wait_final());
        const verify_report v = settled(eng, 4);
        CHECK(v.skipped[static_cast<size_t>(verify_skip::inflight)] == 3);
        CHECK(v.checks == 1);
        CHECK(v.total_divergences() == 0);
    }
}
