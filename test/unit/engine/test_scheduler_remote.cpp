// The scheduler as a pd decode engine (scheduler_options::remote), over the fake model and a
// scripted remote_prefill: transferring requests take no model step, continue with the tokens a
// single engine would produce, and every way out of the transferring state goes back through the
// remote (abort, failure, preemption, shutdown) so no sequence or capacity leaks.
#include <doctest/doctest.h>

#include <deque>
#include <map>
#include <thread>

#include "engine_test_util.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

class fake_remote final : public remote_prefill {
  public:
    explicit fake_remote(fake_executor* exec) : exec_(exec) {}

    void set_wake(std::function<void()> wake) override {
        std::lock_guard lock(mu_);
        wake_ = std::move(wake);
    }
    std::optional<std::string> unavailable() const override {
        std::lock_guard lock(mu_);
        return down_;
    }
    status start(const remote_prefill_job& job) override {
        std::lock_guard lock(mu_);
        jobs_[job.id] = {job.sequence, {job.prompt.begin(), job.prompt.end()}, *job.params, job.seed};
        ++started_;
        if (auto_complete_) to_complete_.push_back(job.id);
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
        return status::ok();
    }
    void release(request_id id, sequence_id seq, release_cause cause) override {
        exec_->free_sequence(seq);
        std::lock_guard lock(mu_);
        released_.emplace_back(id, cause);
        jobs_.erase(id);
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
    }
    void poll(std::vector<remote_prefill_result>& out) override {
        std::lock_guard lock(mu_);
        for (request_id id : to_complete_) {
            auto it = jobs_.find(id);
            if (it == jobs_.end()) continue;
            const job& j = it->second;
            exec_->land_prefix(j.seq, j.prompt);
            uint64_t h = fake_executor::k_empty_hash;
            for (int32_t t : j.prompt) h = fake_executor::extend_hash(h, t);
            std::vector<float> row(64), scratch;
            fake_executor::logits_for_prefix_hash(h, row);
            std::vector<int32_t> none;
            sample_result s = sample_token(row, j.params, {j.prompt, none, j.seed, 0}, scratch);
            remote_prefill_result r;
            r.id = id;
            r.first_token = s.token;
            r.first_logprobs = s.logprobs;
            out.push_back(std::move(r));
            jobs_.erase(it);
        }
        to_complete_.clear();
        for (auto& [id, why] : to_fail_) {
            if (jobs_.count(id) == 0) continue;
            remote_prefill_result r;
            r.id = id;
            r.error = make_error(error_code::data_loss, why);
            out.push_back(std::move(r));
        }
        to_fail_.clear();
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
    }
    bool busy() const override { return in_flight_.load() > 0; }

    // Test thread.
    void complete(request_id id) { act([&] { to_complete_.push_back(id); }); }
    void fail(request_id id, std::string why) { act([&] { to_fail_.emplace_back(id, why); }); }
    void set_auto_complete(bool on) { act([&] { auto_complete_ = on; }); }
    void set_down(std::optional<std::string> why) { act([&] { down_ = std::move(why); }); }
    int started() const { std::lock_guard lock(mu_); return started_; }
    std::vector<std::pair<request_id, release_cause>> released() const {
        std::lock_guard lock(mu_);
        return released_;
    }
    size_t jobs() const { std::lock_guard lock(mu_); return jobs_.size(); }

  private:
    struct job {
        sequence_id seq;
        std::vector<int32_t> prompt;
        sampling_params params;
        uint64_t seed;
    };
    // Mutates under the lock, then wakes the scheduler outside it (it takes its own lock).
    void act(const std::function<void()>& fn) {
        std::function<void()> wake;
        {
            std::lock_guard lock(mu_);
            fn();
            wake = wake_;
        }
        if (wake) wake();
    }

    fake_executor* exec_;
    mutable std::mutex mu_;
    std::function<void()> wake_;
    std::map<request_id, job> jobs_;
    std::vector<request_id> to_complete_;
    std::vector<std::pair<request_id, std::string>> to_fail_;
    std::vector<std::pair<request_id, release_cause>> released_;
    std::optional<std::string> down_;
    bool auto_complete_ = false;
    int started_ = 0;
    std::atomic<int64_t> in_flight_{0};
};

struct remote_engine {
    fake_executor* exec = nullptr;
    std::shared_ptr<fake_remote> remote;
    std::unique_ptr<scheduler> eng;
};

remote_engine make_remote_engine(fake_executor_options fo, int64_t pages = 4096,
                                 int64_t max_running = 16) {
    auto exec = std::make_unique<fake_executor>(fo);
    remote_engine t;
    t.exec = exec.get();
    t.remote = std::make_shared<fake_remote>(t.exec);
    scheduler_options so;
    so.max_running_requests = max_running;
    so.remote = t.remote;
    t.eng = std::make_unique<scheduler>(std::move(exec),
                                        std::make_unique<paged_capacity>(16, pages), so);
    return t;
}

bool eventually(const std::function<bool()>& pred, int ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pred();
}

}  // namespace

TEST_CASE("remote prefill: requests continue from the transferred state with single's tokens") {
    fake_executor_options fo;
    auto t = make_remote_engine(fo);
    t.remote->set_auto_complete(true);
    std::deque<collector> cols(8);
    std::vector<std::vector<int32_t>> prompts;
    sampling_params p;
    p.temperature = 0.9;
    p.max_tokens = 12;
    for (int i = 0; i < 8; ++i) {
        prompts.push_back(make_prompt(uint64_t(i), 3 + i * 7, fo.vocab));
        p.seed = uint64_t(100 + i);
        REQUIRE(t.eng->submit({prompts[i], p, cols[i].sink(), ""}));
    }
    for (int i = 0; i < 8; ++i) {
        REQUIRE(cols[i].wait_final());
        p.seed = uint64_t(100 + i);
        CHECK(cols[i].tokens == reference_tokens(prompts[i], p, 100 + i, fo));
    }
    CHECK(t.remote->started() == 8);
    // The model never saw a prompt chunk: one token per request per step, decode only.
    CHECK(t.exec->max_chunk_seen() == 1);
    CHECK(t.remote->released().empty());
    CHECK(eventually([&] { return t.exec->live_sequences() == 0; }));
}

TEST_CASE("remote prefill: abort, failure and shutdown while transferring go through release") {
    fake_executor_options fo;
    auto t = make_remote_engine(fo);
    collector a, b, c;
    sampling_params p;
    p.max_tokens = 4;
    auto ida = t.eng->submit({make_prompt(1, 20, fo.vocab), p, a.sink(), ""});
    auto idb = t.eng->submit({make_prompt(2, 20, fo.vocab), p, b.sink(), ""});
    auto idc = t.eng->submit({make_prompt(3, 20, fo.vocab), p, c.sink(), ""});
    REQUIRE((ida && idb && idc));
    REQUIRE(eventually([&] { return t.remote->jobs() == 3; }));
    CHECK(t.eng->stats().running == 3);
    CHECK(t.exec->steps_executed() == 0);  // nothing to compute while they transfer

    t.eng->abort(*ida);
    REQUIRE(a.wait_final());
    CHECK(a.last.reason == finish_reason::aborted);
    t.remote->fail(*idb, "checksum mismatch in layer 2");
    REQUIRE(b.wait_final());
    CHECK(b.last.reason == finish_reason::error);
    CHECK(b.last.error.message().find("prefill transfer failed") != std::string::npos);
    CHECK(b.last.error.message().find("checksum mismatch in layer 2") != std::string::npos);
    auto rel = t.remote->released();
    REQUIRE(rel.size() == 2);
    CHECK(rel[0] == std::pair{*ida, release_cause::client});
    CHECK(rel[1] == std::pair{*idb, release_cause::error});

    t.eng.reset();  // shutdown with c still transferring
    REQUIRE(c.wait_final());
    CHECK(c.last.reason == finish_reason::error);
    CHECK(t.remote->released().back() == std::pair{*idc, release_cause::shutdown});
}

TEST_CASE("remote prefill: no prefill engine → 503 at submit; queued requests fail fast") {
    fake_executor_options fo;
    auto t = make_remote_engine(fo);
    t.remote->set_down("no prefill peer connected");
    collector a;
    sampling_params p;
    auto id = t.eng->submit({make_prompt(1, 5, fo.vocab), p, a.sink(), ""});
    REQUIRE_FALSE(id);
    CHECK(id.error().code() == error_code::unavailable);
    CHECK(id.error().message().find("prefill peer") != std::string::npos);
    CHECK(t.eng->stats().rejected_queue_full == 1);
}

TEST_CASE("remote prefill: a transferring request preempted for pages is re-sent; tokens unchanged") {
    fake_executor_options fo;
    fo.step_delay_us = 5000;  // A decodes slowly enough for B to arrive while A is short
    // 4 pages of 16 tokens: A (8-token prompt + 30 tokens: 3 pages) and B (32-token prompt:
    // 2 pages) fit together only while A is short; when A grows, B, the newest, is preempted
    // while it still waits for its prefill.
    auto t = make_remote_engine(fo, 4);
    collector a, b;
    sampling_params pa;
    pa.temperature = 0;
    pa.max_tokens = 30;
    pa.ignore_eos = true;
    sampling_params pb = pa;
    pb.max_tokens = 5;
    const auto prompt_a = make_prompt(7, 8, fo.vocab);
    const auto prompt_b = make_prompt(8, 32, fo.vocab);
    auto ida = t.eng->submit({prompt_a, pa, a.sink(), ""});
    REQUIRE(ida);
    REQUIRE(eventually([&] { return t.remote->jobs() == 1; }));
    t.remote->complete(*ida);
    REQUIRE(a.wait_tokens(1));
    auto idb = t.eng->submit({prompt_b, pb, b.sink(), ""});
    REQUIRE(idb);
    REQUIRE(a.wait_final());
    CHECK(a.tokens == reference_tokens(prompt_a, pa, 0, fo));
    // B was admitted while A was short, preempted when A grew, and re-sent after.
    auto rel = t.remote->released();
    REQUIRE(rel.size() >= 1);
    CHECK(rel[0] == std::pair{*idb, release_cause::preempted});
    CHECK(t.eng->stats().preemptions >= 1);
    REQUIRE(eventually([&] { return t.remote->jobs() == 1; }));
    CHECK(t.remote->started() >= 3);
    t.remote->complete(*idb);
    REQUIRE(b.wait_final());
    CHECK(b.tokens == reference_tokens(prompt_b, pb, 0, fo));
    CHECK(eventually([&] { return t.exec->live_sequences() == 0; }));
}
