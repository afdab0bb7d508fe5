// The pd topology end to end inside one process, on the real CPU model: prefill and decode
// engines joined by inproc and by loopback tcp produce exactly the tokens (and logprobs) the
// single topology produces, for each cache dtype; an abort wave in the middle of transfers
// leaves no page behind and the next wave is still identical.
#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <thread>

#include "engine/engine_test_util.h"
#include "engine/tiny_checkpoint.h"
#include "topo/deployment.h"
#include "topo/deployment_test_config.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

config base_config(const std::string& model_dir) {
    return tandem::test::deployment_test_config(model_dir);
}

config with_topology(config c, const std::string& mode, const std::string& kind) {
    c.topology.mode = mode;
    c.transport.kind = kind;
    return c;
}

using running = tandem::test::healthy_deployment;

struct outcome {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<float> prompt_logprobs;
    finish_reason reason = finish_reason::none;
    bool operator==(const outcome&) const = default;
};

std::vector<outcome> generate(tandem::engine::engine& eng,
                              const std::vector<std::vector<int32_t>>& prompts,
                              const sampling_params& p) {
    std::deque<collector> cols(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto id = eng.submit({prompts[i], p, cols[i].sink(), ""});
        REQUIRE_MESSAGE(id, id.error().message());
    }
    std::vector<outcome> out;
    for (auto& c : cols) {
        REQUIRE(c.wait_final(k_model_wait_ms));
        CHECK(c.finals == 1);
        CHECK_MESSAGE(c.last.reason != finish_reason::error, c.last.error.message());
        outcome o;
        o.tokens = c.tokens;
        for (const auto& l : c.logprobs) o.logprobs.push_back(l.chosen.logprob);
        for (const auto& l : c.prompt_logprobs) o.prompt_logprobs.push_back(l.chosen.logprob);
        o.reason = c.last.reason;
        out.push_back(std::move(o));
    }
    return out;
}

std::vector<std::vector<int32_t>> prompts_of(std::initializer_list<int64_t> lengths, uint64_t key) {
    std::vector<std::vector<int32_t>> out;
    for (int64_t n : lengths) out.push_back(make_prompt(key++, n, 5000));
    return out;
}

int64_t metric_value(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    REQUIRE_MESSAGE(at != std::string::npos, series);
    return std::stoll(text.substr(at + series.size() + 2));
}

bool drained(running& r) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const engine_stats s = r.eng().stats();
        const bool quiet = r.dep->render_metrics().find("tandem_pd_quarantined_requests 0\n") !=
                           std::string::npos;
        if (quiet && s.pages_free == s.pages_total && s.running == 0 && s.queued == 0) return true;
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

}  // namespace

TEST_CASE("pd deployment: inproc and tcp give exactly the tokens of single, per cache dtype") {
    tiny_checkpoint ckpt(21);
    const auto prompts = prompts_of({1, 5, 127, 128, 129, 300, 700}, 100);
    sampling_params greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 8;
    greedy.ignore_eos = true;
    struct combo { const char* kv; const char* idx; const char* kind; };
    for (combo cb : {combo{"fp8", "fp8", "inproc"}, combo{"fp8", "bf16", "tcp"},
                     combo{"fp8", "fp4", "inproc"}, combo{"bf16", "fp8", "tcp"}}) {
        CAPTURE(cb.kv);
        CAPTURE(cb.idx);
        CAPTURE(cb.kind);
        config c = base_config(ckpt.dir.string());
        c.cache.kv_dtype = cb.kv;
        c.cache.index_k_dtype = cb.idx;
        std::vector<outcome> single_out;
        {
            running single(with_topology(c, "single", "inproc"));
            single_out = generate(single.eng(), prompts, greedy);
        }
        running pd(with_topology(c, "pd", cb.kind));
        CHECK(generate(pd.eng(), prompts, greedy) == single_out);
        CHECK(pd.dep->render_metrics().find("tandem_pd_transfers_total{result=\"ok\"} 7\n") !=
              std::string::npos);
        CHECK(drained(pd));
    }
}

TEST_CASE("pd deployment: seeded sampling, logprobs and prompt logprobs travel exactly") {
    tiny_checkpoint ckpt(22);
    const auto prompts = prompts_of({3, 140, 260}, 200);
    sampling_params p;
    p.temperature = 0.8;
    p.top_p = 0.9;
    p.repetition_penalty = 1.2;
    p.seed = 1234;
    p.max_tokens = 6;
    p.logprobs = 3;
    p.prompt_logprobs = true;
    p.ignore_eos = true;
    config c = base_config(ckpt.dir.string());
    std::vector<outcome> single_out;
    {
        running single(with_topology(c, "single", "inproc"));
        single_out = generate(single.eng(), prompts, p);
    }
    running pd(with_topology(c, "pd", "inproc"));
    const auto pd_out = generate(pd.eng(), prompts, p);
    CHECK(pd_out == single_out);
    CHECK(pd_out[1].prompt_logprobs.size() == 140);
    CHECK(pd_out[1].logprobs.size() == 6);
}

TEST_CASE("pd deployment: an abort wave during transfers leaks nothing; the next wave is identical") {
    tiny_checkpoint ckpt(23);
    config c = base_config(ckpt.dir.string());
    c.scheduler.max_prefill_tokens = 64;  // long prefills: aborts land mid-transfer
    const auto wave1 = prompts_of({700, 650, 600, 550, 500, 450, 400, 350, 300, 250, 200, 150}, 300);
    const auto wave2 = prompts_of({260, 30, 520}, 400);
    sampling_params greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 5;
    greedy.ignore_eos = true;
    std::vector<outcome> single_out;
    {
        running single(with_topology(c, "single", "inproc"));
        single_out = generate(single.eng(), wave2, greedy);
    }
    running pd(with_topology(c, "pd", "inproc"));
    std::deque<collector> cols(wave1.size());
    std::vector<request_id> ids;
    for (size_t i = 0; i < wave1.size(); ++i) {
        auto id = pd.eng().submit({wave1[i], greedy, cols[i].sink(), ""});
        REQUIRE(id);
        ids.push_back(*id);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    for (request_id id : ids) pd.eng().abort(id);
    int aborted = 0;
    for (auto& col : cols) {
        REQUIRE(col.wait_final(k_model_wait_ms));
        CHECK(col.finals == 1);
        CHECK(col.events_after_final == 0);
        aborted += col.last.reason == finish_reason::aborted ? 1 : 0;
    }
    CHECK(aborted > 0);
    CHECK(drained(pd));
    // Transfers were cut mid-flight, and every one of them was released by its ACK (the lease is
    // 10 s: drained() gives up sooner).
    const std::string m = pd.dep->render_metrics();
    const int64_t cut = metric_value(m, "tandem_pd_transfers_total{result=\"aborted\"}");
    CHECK(cut > 0);
    CHECK(metric_value(m, "tandem_pd_abort_acks_total") == cut);
    CHECK(metric_value(m, "tandem_pd_abort_leases_expired_total") == 0);
    CHECK(generate(pd.eng(), wave2, greedy) == single_out);
    CHECK(drained(pd));
}

TEST_CASE("pd deployment: one decode server balances jobs over two prefill servers (tcp)") {
    tiny_checkpoint ckpt(24);
    config c = with_topology(base_config(ckpt.dir.string()), "pd", "tcp");
    c.topology.role = "prefill";
    liveness_registry l1, l2;
    auto p1 = topo::deployment::create(c, l1);
    auto p2 = topo::deployment::create(c, l2);
    REQUIRE(p1);
    REQUIRE(p2);
    CHECK((*p1)->api_engine() == nullptr);
    CHECK((*p1)->no_engine_reason().find("prefill") != std::string::npos);
    c.topology.role = "decode";
    c.transport.peers = {(*p1)->prefill_address(), (*p2)->prefill_address()};
    running decode(c);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (decode.dep->render_metrics().find("tandem_pd_prefill_peers_ready 2\n") ==
               std::string::npos &&
           std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    sampling_params greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 3;
    const auto prompts = prompts_of({200, 210, 220, 230, 240, 250, 260, 270}, 500);
    std::vector<outcome> single_out;
    {
        running single(with_topology(base_config(ckpt.dir.string()), "single", "inproc"));
        single_out = generate(single.eng(), prompts, greedy);
    }
    CHECK(generate(decode.eng(), prompts, greedy) == single_out);
    const int64_t jobs1 = metric_value((*p1)->render_metrics(), "tandem_pd_jobs_total{result=\"ok\"}");
    const int64_t jobs2 = metric_value((*p2)->render_metrics(), "tandem_pd_jobs_total{result=\"ok\"}");
    CHECK(jobs1 + jobs2 == 8);
    CHECK(jobs1 > 0);
    CHECK(jobs2 > 0);
}

TEST_CASE("pd deployment: peers serving different weights refuse each other") {
    tiny_checkpoint a(31), b(32);  // same preset, same layout, different weights
    config c = with_topology(base_config(a.dir.string()), "pd", "tcp");
    c.topology.role = "prefill";
    liveness_registry l1;
    auto prefill = topo::deployment::create(c, l1);
    REQUIRE(prefill);
    config d = with_topology(base_config(b.dir.string()), "pd", "tcp");
    d.topology.role = "decode";
    d.transport.peers = {(*prefill)->prefill_address()};
    liveness_registry l2;
    auto decode = topo::deployment::create(d, l2);
    REQUIRE(decode);
    std::optional<std::string> why;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
        why = (*decode)->health_problem();
        if (why && why->find("model mismatch") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(why.has_value());
    CHECK(why->find("model mismatch") != std::string::npos);
    CHECK(why->find(a.dir.string()) != std::string::npos);
    CHECK(why->find(b.dir.string()) != std::string::npos);
    collector col;
    sampling_params p;
    auto id = (*decode)->api_engine()->submit({{1, 2, 3}, p, col.sink(), ""});
    REQUIRE_FALSE(id);
    CHECK(id.error().code() == error_code::unavailable);
}

TEST_CASE("pd deployment: topology and transport combinations are checked at startup") {
    auto cfg = load_config({});
    REQUIRE(cfg);
    config c = *cfg;
    c.topology.role = "prefill";
    auto st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("topology.mode") != std::string::npos);
    c.topology.mode = "pd";
    st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("transport.kind = \"tcp\"") != std::string::npos);
    c.transport.kind = "tcp";
    CHECK(topo::validate_topology(c).is_ok());
    // The AMX tiles are a CPU backend setting: the device backend computes the exact kernels' bits.
    c.backend.cpu_matmul = "amx";
    CHECK(topo::validate_topology(c).is_ok());
    c.backend.device = "cuda";
    st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("backend.cpu_matmul") != std::string::npos);
    c.backend.device = "cpu";
    c.backend.cpu_matmul = "exact";
    c.topology.role = "decode";
    st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("transport.peers") != std::string::npos);
    c.topology.role = "both";
    c.transport.kind = "nccl";
    st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("backend.device = \"cuda\"") != std::string::npos);  // the CPU backend: no GPU pools
    c.backend.device = "cuda";
    st = topo::validate_topology(c);  // one process on a GPU: inproc already copies device to device
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("transport.kind = \"inproc\"") != std::string::npos);
    c.backend.test_emulate_device = true;  // CI's one-process nccl over the emulation
    CHECK(topo::validate_topology(c).is_ok());
    c.backend.test_emulate_device = false;
    c.topology.role = "prefill";  // two processes: frames over tcp, bytes over NCCL
    CHECK(topo::validate_topology(c).is_ok());
    c.transport.nccl_device = 1;  // the pool is on GPU 0 of the process
    st = topo::validate_topology(c);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("CUDA_VISIBLE_DEVICES") != std::string::npos);
}
