// [transport] fault_* keys reach a real pd deployment: an abort storm configured in the file is
// sent by the prefill side (tcp, role both), arrives at the decode side as ABORTs for request ids
// that never exist, and changes nothing: the tokens equal a run without faults, nothing leaks.
#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <thread>

#include "engine/engine_test_util.h"
#include "engine/tiny_checkpoint.h"
#include "topo/deployment.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config pd_tcp_config(const std::string& model_dir, int64_t storm) {
    config_sources src;
    src.set_overrides = {"model.path=" + model_dir, "backend.threads=2",
                         "cache.memory_bytes=67108864", "cache.page_size=128",
                         "scheduler.max_prefill_tokens=512", "topology.mode=pd",
                         "transport.kind=tcp", "transport.listen_port=0",
                         "transport.fault_abort_storm=" + std::to_string(storm),
                         "transport.fault_seed=7"};
    auto cfg = load_config(src);
    REQUIRE_MESSAGE(cfg, cfg.error().message());
    return *cfg;
}

int64_t metric_value(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    REQUIRE_MESSAGE(at != std::string::npos, series);
    return std::stoll(text.substr(at + series.size() + 2));
}

struct run_result {
    std::vector<std::vector<int32_t>> tokens;
    int64_t decode_frames = 0;
    int64_t unknown_aborts = 0;
    int64_t transfers_ok = 0;
};

run_result run(const config& c, const std::vector<std::vector<int32_t>>& prompts) {
    liveness_registry liveness;
    auto dep = topo::deployment::create(c, liveness);
    REQUIRE_MESSAGE(dep, dep.error().message());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((*dep)->health_problem() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE_FALSE((*dep)->health_problem());
    sampling_params greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 6;
    greedy.ignore_eos = true;
    std::deque<collector> cols(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto id = (*dep)->api_engine()->submit({prompts[i], greedy, cols[i].sink(), ""});
        REQUIRE_MESSAGE(id, id.error().message());
    }
    run_result r;
    for (auto& col : cols) {
        REQUIRE(col.wait_final(k_model_wait_ms));
        CHECK_MESSAGE(col.last.reason != finish_reason::error, col.last.error.message());
        r.tokens.push_back(col.tokens);
    }
    const std::string m = (*dep)->render_metrics();
    r.decode_frames = metric_value(m, "tandem_pd_decode_transport_frames_received_total");
    r.transfers_ok = metric_value(m, "tandem_pd_transfers_total{result=\"ok\"}");
    r.unknown_aborts = metric_value(m, "tandem_pd_unknown_aborts_total");
    return r;
}

}  // namespace

TEST_CASE("pd fault config: an abort storm from [transport] is delivered and harmless") {
    tiny_checkpoint ckpt(23);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t n : {5, 130, 300}) prompts.push_back(make_prompt(static_cast<uint64_t>(n), n, 5000));
    const run_result calm = run(pd_tcp_config(ckpt.dir.string(), 0), prompts);
    const run_result storm = run(pd_tcp_config(ckpt.dir.string(), 3), prompts);
    CHECK(storm.tokens == calm.tokens);
    CHECK(calm.transfers_ok == 3);
    CHECK(storm.transfers_ok == 3);
    // Three extra ABORTs follow every protocol frame the prefill side sends (the counter holds
    // protocol frames only), so the decode side receives four times as many.
    CHECK(calm.decode_frames > 3);
    CHECK(storm.decode_frames >= 3 * calm.decode_frames);
    // Each storm ABORT was counted as unknown and dropped.
    CHECK(calm.unknown_aborts == 0);
    CHECK(storm.unknown_aborts >= 3 * (calm.decode_frames - 3));
}
