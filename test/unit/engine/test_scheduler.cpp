#include <doctest/doctest.h>

#include <deque>
#include <thread>

#include "engine_test_util.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

// A mix of sampling settings: greedy, seeded temperature with masks, penalties.
sampling_params params_for(int i, int64_t max_tokens) {
    sampling_params p;
    p.max_tokens = max_tokens;
    p.ignore_eos = (i % 4) != 0;  // a quarter may stop at EOS
    switch (i % 3) {
        case 0:
            p.temperature = 0.0;
            break;
        case 1:
            p.temperature = 0.8;
            p.top_k = 20;
            p.top_p = 0.9;
            p.seed = 1000 + static_cast<uint64_t>(i);
            break;
        default:
            p.temperature = 1.0;
            p.min_p = 0.05;
            p.repetition_penalty = 1.3;
            p.presence_penalty = 0.4;
            p.frequency_penalty = 0.2;
            p.seed = 7;
            break;
    }
    return p;
}

struct job {
    std::vector<int32_t> prompt;
    sampling_params params;
    std::vector<int32_t> expected;
};

std::vector<job> make_jobs(int n, const fake_executor_options& fo, int64_t max_prompt,
                           int64_t max_tokens) {
    std::vector<job> jobs;
    for (int i = 0; i < n; ++i) {
        job j;
        j.prompt = make_prompt(static_cast<uint64_t>(i), 1 + (i * 7) % max_prompt, fo.vocab);
        j.params = params_for(i, 1 + (i * 5) % max_tokens);
        j.expected = reference_tokens(j.prompt, j.params, j.params.seed.value_or(0), fo);
        jobs.push_back(std::move(j));
    }
    return jobs;
}

// Runs every job concurrently and checks each gets exactly its reference tokens.
void run_and_check(scheduler& eng, const std::vector<job>& jobs) {
    std::deque<collector> cols(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
        auto id = eng.submit({jobs[i].prompt, jobs[i].params, cols[i].sink(), "t"});
        REQUIRE(id);
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        REQUIRE(cols[i].wait_final());
        std::lock_guard lock(cols[i].mu);
        CHECK(cols[i].tokens == jobs[i].expected);
        CHECK(cols[i].finals == 1);
        CHECK(cols[i].events_after_final == 0);
        CHECK(cols[i].last.completion_tokens == int64_t(jobs[i].expected.size()));
        CHECK(cols[i].last.prompt_tokens == int64_t(jobs[i].prompt.size()));
        bool stopped = cols[i].last.reason == finish_reason::stop;
        CHECK((stopped ? cols[i].last.stop_token == jobs[i].expected.back()
                       : cols[i].last.reason == finish_reason::length));
    }
}

}  // namespace

TEST_CASE("scheduler: 64 concurrent requests get exactly the tokens each gets alone") {
    fake_executor_options fo;
    scheduler_options so;
    so.max_running_requests = 64;
    so.max_prefill_tokens = 4096;
    // The first step waits until all 64 are submitted, so they really share steps.
    std::atomic<bool> go{false};
    so.before_step = [&go](uint64_t) {
        while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    auto jobs = make_jobs(64, fo, 40, 24);
    auto t = make_test_engine(fo, so);
    std::thread release([&go] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        go.store(true);
    });
    run_and_check(*t.eng, jobs);
    release.join();
    CHECK(t.exec->max_batch_seen() == 64);
    // Alone, one at a time: the same tokens again.
    for (int i = 0; i < 6; ++i) run_and_check(*t.eng, {jobs[static_cast<size_t>(i)]});
    CHECK(t.exec->live_sequences() == 0);
    auto s = t.eng->stats();
    CHECK(s.pages_free == s.pages_total);
    CHECK(s.requests_finished == 70);
}

TEST_CASE("scheduler: chunked prefill with chunk sizes 1, 3, 7 and large gives the same tokens") {
    fake_executor_options fo;
    auto jobs = make_jobs(12, fo, 30, 10);
    for (int64_t chunk : {1, 3, 7, 4096}) {
        CAPTURE(chunk);
        scheduler_options so;
        so.max_prefill_tokens = chunk;
        auto t = make_test_engine(fo, so);
        run_and_check(*t.eng, jobs);
        CHECK(t.exec->max_chunk_seen() <= std::max<int64_t>(chunk, 1));
    }
}

TEST_CASE("scheduler: preemption under a tiny cache gives the same tokens and never deadlocks") {
    fake_executor_options fo;
    scheduler_options so;
    so.max_prefill_tokens = 5;
    auto jobs = make_jobs(24, fo, 20, 30);
    // 4-token pages, 14 pages = 56 tokens: two or three requests at a time, and growth forces
    // the newest out again and again.
    auto t = make_test_engine(fo, so, 4, 14);
    run_and_check(*t.eng, jobs);
    auto s = t.eng->stats();
    CHECK(s.preemptions > 0);
    CHECK(s.pages_free == s.pages_total);
    CHECK(t.exec->live_sequences() == 0);
}

TEST_CASE("scheduler: mass abort of 200 in-flight requests returns all capacity") {
    fake_executor_options fo;
    fo.step_delay_us = 200;
    scheduler_options so;
    so.max_running_requests = 64;
    so.max_queued_requests = 256;
    auto t = make_test_engine(fo, so, 16, 2048);
    std::deque<collector> cols(200);
    std::vector<request_id> ids;
    for (int i = 0; i < 200; ++i) {
        sampling_params p;
        p.max_tokens = 1000;
        p.ignore_eos = true;
        auto id = t.eng->submit({make_prompt(uint64_t(i), 20, fo.vocab), p, cols[i].sink(), ""});
        REQUIRE(id);
        ids.push_back(*id);
    }
    REQUIRE(cols[0].wait_tokens(3));  // running for real
    for (request_id id : ids) t.eng->abort(id);
    for (request_id id : ids) t.eng->abort(id);  // idempotent
    t.eng->abort(999999);                        // unknown: ignored
    for (auto& c : cols) {
        REQUIRE(c.wait_final());
        std::lock_guard lock(c.mu);
        CHECK(c.finals == 1);
        CHECK(c.events_after_final == 0);
        CHECK(c.last.reason == finish_reason::aborted);
    }
    auto s = t.eng->stats();
    CHECK(s.requests_aborted == 200);
    CHECK(s.pages_free == s.pages_total);
    CHECK(s.running == 0);
    CHECK(s.queued == 0);
    CHECK(t.exec->live_sequences() == 0);
}

TEST_CASE("scheduler: a full queue rejects with unavailable") {
    fake_executor_options fo;
    fo.step_delay_us = 2000;
    scheduler_options so;
    so.max_running_requests = 2;
    so.max_queued_requests = 3;
    auto t = make_test_engine(fo, so);
    std::deque<collector> cols(6);
    sampling_params p;
    p.max_tokens = 50;
    p.ignore_eos = true;
    std::vector<request_id> ids;
    for (int i = 0; i < 5; ++i) {
        auto id = t.eng->submit({{1, 2, 3}, p, cols[i].sink(), ""});
        REQUIRE(id);
        ids.push_back(*id);
    }
    auto rejected = t.eng->submit({{1, 2, 3}, p, cols[5].sink(), ""});
    REQUIRE_FALSE(rejected);
    CHECK(rejected.error().code() == error_code::unavailable);
    CHECK(t.eng->stats().rejected_queue_full == 1);
    for (request_id id : ids) t.eng->abort(id);
    for (int i = 0; i < 5; ++i) REQUIRE(cols[i].wait_final());
    CHECK(t.eng->submit({{1, 2, 3}, p, cols[5].sink(), ""}));  // room again
    CHECK(cols[5].wait_final());
}

TEST_CASE("scheduler: a request not started within queue_timeout_ms fails clearly") {
    fake_executor_options fo;
    fo.step_delay_us = 1000;
    scheduler_options so;
    so.max_running_requests = 1;
    so.queue_timeout_ms = 100;
    auto t = make_test_engine(fo, so);
    collector busy, late;
    sampling_params p;
    p.max_tokens = 400;  // ~0.4 s or more of steps
    p.ignore_eos = true;
    auto a = t.eng->submit({{5, 6}, p, busy.sink(), ""});
    REQUIRE(a);
    REQUIRE(busy.wait_tokens(1));
    REQUIRE(t.eng->submit({{7, 8}, p, late.sink(), ""}));
    REQUIRE(late.wait_final(5000));
    {
        std::lock_guard lock(late.mu);
        CHECK(late.last.reason == finish_reason::error);
        CHECK(late.last.error.code() == error_code::deadline_exceeded);
        CHECK(late.last.error.message().find("queue_timeout_ms") != std::string::npos);
        CHECK(late.tokens.empty());
    }
    t.eng->abort(*a);
    REQUIRE(busy.wait_final());
    CHECK(t.eng->stats().requests_failed == 1);
}

TEST_CASE("scheduler: submit validates prompt, vocabulary and the context limit") {
    fake_executor_options fo;
    fo.max_context = 64;
    auto t = make_test_engine(fo, {});
    CHECK(t.eng->max_context_tokens() == 64);
    collector c;
    sampling_params p;
    p.max_tokens = 10;
    auto over = t.eng->submit({std::vector<int32_t>(60, 1), p, c.sink(), ""});
    REQUIRE_FALSE(over);
    CHECK(over.error().code() == error_code::invalid_argument);
    CHECK(over.error().message().find("context limit") != std::string::npos);
    CHECK(t.eng->submit({{}, p, c.sink(), ""}).error().code() == error_code::invalid_argument);
    CHECK(t.eng->submit({{1, 64}, p, c.sink(), ""}).error().code() == error_code::invalid_argument);
    p.max_tokens = 0;
    CHECK(t.eng->submit({{1}, p, c.sink(), ""}).error().code() == error_code::invalid_argument);
    // Exactly at the limit is fine.
    p.max_tokens = 4;
    p.ignore_eos = true;
    REQUIRE(t.eng->submit({std::vector<int32_t>(60, 1), p, c.sink(), ""}));
    REQUIRE(c.wait_final());
    CHECK(c.tokens.size() == 4);
    // The cache caps the limit too: 2 pages of 16 tokens.
    auto small = make_test_engine(fo, {}, 16, 2);
    CHECK(small.eng->max_context_tokens() == 32);
}

TEST_CASE("scheduler: stop token ids, EOS and finish() end a request with reason stop") {
    fake_executor_options fo;
    auto t = make_test_engine(fo, {});
    auto prompt = make_prompt(77, 9, fo.vocab);
    sampling_params p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = 12;
    auto full = reference_tokens(prompt, p, 0, fo);
    REQUIRE(full.size() == 12);
    // Stop on the 5th token's id: ends at its first occurrence.
    p.stop_token_ids = {full[4]};
    size_t first = 0;
    while (full[first] != full[4]) ++first;
    collector c;
    REQUIRE(t.eng->submit({prompt, p, c.sink(), ""}));
    REQUIRE(c.wait_final());
    CHECK(c.tokens == std::vector<int32_t>(full.begin(), full.begin() + first + 1));
    CHECK(c.last.reason == finish_reason::stop);
    CHECK(c.last.stop_token == full[4]);
    // finish() from the API (a stop string) ends a long request early.
    collector d;
    p.stop_token_ids.clear();
    p.max_tokens = 2000;
    fo.step_delay_us = 1000;  // ≥ 2 s for all 2000 tokens: finish() lands long before
    auto slow = make_test_engine(fo, {});
    auto id = slow.eng->submit({prompt, p, d.sink(), ""});
    REQUIRE(id);
    REQUIRE(d.wait_tokens(2));
    slow.eng->finish(*id);
    slow.eng->finish(*id);
    REQUIRE(d.wait_final());
    CHECK(d.last.reason == finish_reason::stop);
    CHECK(d.last.stop_token == -1);
    CHECK(d.tokens.size() < 2000);
    CHECK(d.finals == 1);
}

TEST_CASE("scheduler: prompt logprobs are exact for every chunk size, once, despite preemption") {
    fake_executor_options fo;
    auto prompt = make_prompt(5, 23, fo.vocab);
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.prompt_logprobs = true;
    p.logprobs = 2;
    // Direct: the logits after prompt[0..i] score prompt[i+1].
    std::vector<float> expected;
    uint64_t h = fake_executor::k_empty_hash;
    std::vector<float> row(size_t(fo.vocab)), lp(size_t(fo.vocab));
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
        h = fake_executor::extend_hash(h, prompt[i]);
        fake_executor::logits_for_prefix_hash(h, row);
        log_softmax(row, lp);
        expected.push_back(lp[size_t(prompt[i + 1])]);
    }
    // Chunk sizes alone; then 6 copies at once in 4-token pages x 13: the first two prefill
    // together, their decodes outgrow the cache, the newer is preempted after its prompt was
    // scored, and its recompute must not score the prompt again.
    for (auto [chunk, copies, pages] :
         {std::tuple{1, 1, 4096}, {4, 1, 4096}, {100, 1, 4096}, {100, 6, 13}}) {
        CAPTURE(chunk);
        scheduler_options so;
        so.max_prefill_tokens = chunk;
        std::atomic<bool> go{false};  // the first step waits for every copy
        so.before_step = [&go](uint64_t) {
            while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        };
        auto t = make_test_engine(fo, so, 4, pages);
        std::deque<collector> cols(static_cast<size_t>(copies));
        for (auto& c : cols) REQUIRE(t.eng->submit({prompt, p, c.sink(), ""}));
        go.store(true);
        for (auto& c : cols) REQUIRE(c.wait_final());
        if (copies > 1) CHECK(t.eng->stats().preemptions > 0);
        for (auto& c : cols) {
            std::lock_guard lock(c.mu);
            REQUIRE(c.prompt_logprobs.size() == prompt.size());
            CHECK(c.prompt_logprobs[0].chosen.token == prompt[0]);  // the placeholder
            CHECK(c.prompt_logprobs[0].top.empty());
            for (size_t i = 0; i < expected.size(); ++i) {
                CHECK(c.prompt_logprobs[i + 1].chosen.token == prompt[i + 1]);
                CHECK(c.prompt_logprobs[i + 1].chosen.logprob == doctest::Approx(expected[i]));
                CHECK(c.prompt_logprobs[i + 1].top.size() == 2);
            }
            CHECK(c.logprobs.size() == 6);
            CHECK(c.tokens == reference_tokens(prompt, p, 0, fo));
        }
    }
}

TEST_CASE("scheduler: prompt-logprob rows per step stay within max_prompt_logprob_tokens, other prompts keep the budget") {
    fake_executor_options fo;
    sampling_params with;
    with.temperature = 0;
    with.max_tokens = 3;
    with.ignore_eos = true;
    with.prompt_logprobs = true;
    sampling_params without = with;
    without.prompt_logprobs = false;
    const auto a = make_prompt(31, 23, fo.vocab), b = make_prompt(32, 23, fo.vocab), c = make_prompt(33, 40, fo.vocab);
    for (int64_t cap : {int64_t{5}, int64_t{1000}}) {
        CAPTURE(cap);
        scheduler_options so;
        so.max_prefill_tokens = 100;
        so.max_prompt_logprob_tokens = cap;
        std::atomic<bool> go{false};  // the first step sees all three
        so.before_step = [&go](uint64_t) {
            while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        };
        auto t = make_test_engine(fo, so);
        std::deque<collector> cols(3);
        REQUIRE(t.eng->submit({a, with, cols[0].sink(), ""}));
        REQUIRE(t.eng->submit({b, with, cols[1].sink(), ""}));
        REQUIRE(t.eng->submit({c, without, cols[2].sink(), ""}));
        go.store(true);
        for (auto& col : cols) REQUIRE(col.wait_final());
        // Capped: at most 5 prompt-logprob rows plus one row per sequence; uncapped, both prompts'
        // 46 rows come back in the first step.
        if (cap == 5) CHECK(t.exec->max_logit_rows_seen() <= 5 + 3);
        else CHECK(t.exec->max_logit_rows_seen() >= 46);
        CHECK(t.exec->max_chunk_seen() == 40);  // the prompt without logprobs in one chunk
        const std::vector<int32_t>* prompts[] = {&a, &b, &c};
        for (size_t i = 0; i < 3; ++i) {
            std::lock_guard lock(cols[i].mu);
            CHECK(cols[i].tokens == reference_tokens(*prompts[i], i < 2 ? with : without, 0, fo));
            CHECK(cols[i].prompt_logprobs.size() == (i < 2 ? prompts[i]->size() : 0));
        }
    }
}

TEST_CASE("scheduler: an injected stall makes the heartbeat report a problem") {
    fake_executor_options fo;
    scheduler_options so;
    liveness_registry reg;
    so.loop_heartbeat = reg.add("scheduler");
    auto t = make_test_engine(fo, so);
    CHECK_FALSE(reg.problem(50));
    t.eng->inject_stall(400);
    collector c;
    sampling_params p;
    p.max_tokens = 2;
    REQUIRE(t.eng->submit({{1, 2}, p, c.sink(), ""}));
    std::optional<std::string> seen;
    for (int i = 0; i < 100 && !seen; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        seen = reg.problem(50);
    }
    REQUIRE(seen);
    CHECK(seen->find("scheduler") != std::string::npos);
    REQUIRE(c.wait_final());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(reg.problem(50));  // idle again: healthy
}

TEST_CASE("scheduler: stopping the engine ends every request with one final event") {
    fake_executor_options fo;
    fo.step_delay_us = 500;
    std::deque<collector> cols(30);
    {
        scheduler_options so;
        so.max_running_requests = 8;
        auto t = make_test_engine(fo, so);
        sampling_params p;
        p.max_tokens = 500;
        p.ignore_eos = true;
        for (auto& c : cols) REQUIRE(t.eng->submit({{3, 4, 5}, p, c.sink(), ""}));
        REQUIRE(cols[0].wait_tokens(2));
    }
    for (auto& c : cols) {
        REQUIRE(c.finals == 1);
        CHECK(c.last.reason == finish_reason::error);
        CHECK(c.last.error.code() == error_code::unavailable);
    }
}

TEST_CASE("scheduler: metrics record steps, batch sizes and latencies") {
    fake_executor_options fo;
    auto t = make_test_engine(fo, {});
    auto jobs = make_jobs(8, fo, 10, 5);
    run_and_check(*t.eng, jobs);
    engine_metrics m = t.eng->metrics();
    CHECK(m.stats.steps > 0);
    CHECK(m.step_time.count == m.stats.steps);
    CHECK(m.batch_size.count == m.stats.steps);
    CHECK(m.time_to_first_token.count == 8);
    CHECK(m.end_to_end_latency.count == 8);
    int64_t generated = 0;
    for (auto& j : jobs) generated += int64_t(j.expected.size());
    CHECK(m.stats.generated_tokens == generated);
    CHECK(m.inter_token_latency.count == generated - 8);
    CHECK(m.batch_size.render_prometheus("tandem_batch_size", "x").find("_count") !=
          std::string::npos);
}

TEST_CASE("scheduler: a failed model step fails its requests once and the engine carries on") {
    fake_executor_options fo;
    fo.fail_step = 3;
    scheduler_options so;
    std::atomic<bool> go{false};  // both requests share the failing step
    so.before_step = [&go](uint64_t) {
        while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    auto t = make_test_engine(fo, so);
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 8;
    p.ignore_eos = true;
    collector a, b;
    REQUIRE(t.eng->submit({{1, 2, 3}, p, a.sink(), ""}));
    REQUIRE(t.eng->submit({{4, 5}, p, b.sink(), ""}));
    go.store(true);
    for (collector* c : {&a, &b}) {
        REQUIRE(c->wait_final());
        std::lock_guard lock(c->mu);
        CHECK(c->finals == 1);
        CHECK(c->last.reason == finish_reason::error);
        CHECK(c->last.error.message().find("injected failure") != std::string::npos);
        CHECK(c->tokens.size() == 2);  // steps 1 and 2 each gave a token
    }
    collector later;
    REQUIRE(t.eng->submit({{1, 2, 3}, p, later.sink(), ""}));
    REQUIRE(later.wait_final());
    CHECK(later.tokens == reference_tokens({1, 2, 3}, p, 0, fo));
    CHECK(t.eng->stats().requests_failed == 2);
    CHECK(t.exec->live_sequences() == 0);
}
