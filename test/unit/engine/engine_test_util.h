// Helpers for scheduler tests: event collectors, a reference generator that runs the fake
// model and the sampler directly (no scheduler), and an engine factory with the fake executor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/capacity.h"
#include "engine/fake_executor.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace tandem::engine::test {

// How long a test on the real tiny model waits for a request before calling it hung: a hang
// guard, never a speed check. Sanitizer builds on a loaded 2-core box run the model 10-50x
// slower (TSan: a 3-turn session test took over 2 minutes), so it is generous.
inline constexpr int64_t k_model_wait_ms = 600000;

// Collects one request's events; checks there is exactly one final event and nothing after it.
struct collector {
    // A test that fails a REQUIRE unwinds and destroys its collectors while the engine may still
    // deliver to them (seen under TSan, where everything is slow enough for waits to time out):
    // the sink holds this shared guard, and events reaching a destroyed collector are dropped.
    struct lifetime_guard {
        std::mutex mu;
        bool alive = true;
    };
    std::shared_ptr<lifetime_guard> guard = std::make_shared<lifetime_guard>();

    collector() = default;
    collector(const collector&) = delete;
    collector& operator=(const collector&) = delete;
    ~collector() {
        std::lock_guard lock(guard->mu);
        guard->alive = false;
    }

    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    std::vector<position_logprobs> logprobs;
    std::vector<position_logprobs> prompt_logprobs;
    int events = 0;
    int finals = 0;
    int events_after_final = 0;
    token_event last;

    event_sink sink() {
        return [this, g = guard](token_event&& e) {
            std::lock_guard alive_lock(g->mu);
            if (!g->alive) return;
            std::lock_guard lock(mu);
            if (finals > 0) ++events_after_final;
            ++events;
            tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
            for (auto& l : e.logprobs) logprobs.push_back(l);
            for (auto& l : e.prompt_logprobs) prompt_logprobs.push_back(l);
            if (e.finished) ++finals;
            last = std::move(e);
            cv.notify_all();
        };
    }
    bool wait_final(int64_t ms = 20000) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::milliseconds(ms), [this] { return finals > 0; });
    }
    bool wait_tokens(size_t n, int64_t ms = 20000) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::milliseconds(ms),
                           [&] { return tokens.size() >= n || finals > 0; });
    }
};

// What a request generates when run alone, computed without the scheduler.
inline std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt,
                                             const sampling_params& p, uint64_t seed,
                                             const fake_executor_options& fo) {
    uint64_t h = fake_executor::k_empty_hash;
    for (int32_t t : prompt) h = fake_executor::extend_hash(h, t);
    std::vector<int32_t> out;
    std::vector<float> row(static_cast<size_t>(fo.vocab)), scratch;
    for (;;) {
        fake_executor::logits_for_prefix_hash(h, row);
        int32_t t = sample_token(row, p, {prompt, out, seed, out.size()}, scratch).token;
        out.push_back(t);
        bool stop = (!p.ignore_eos && t == fo.eos_token_id);
        for (int32_t s : p.stop_token_ids) stop = stop || s == t;
        if (stop || static_cast<int64_t>(out.size()) >= p.max_tokens) return out;
        h = fake_executor::extend_hash(h, t);
    }
}

struct test_engine {
    fake_executor* exec = nullptr;  // owned by the scheduler
    std::unique_ptr<scheduler> eng;
};

inline test_engine make_test_engine(fake_executor_options fo, scheduler_options so,
                                    int64_t page_size = 16, int64_t pages = 4096) {
    auto exec = std::make_unique<fake_executor>(fo);
    test_engine t;
    t.exec = exec.get();
    t.eng = std::make_unique<scheduler>(std::move(exec),
                                        std::make_unique<paged_capacity>(page_size, pages), so);
    return t;
}

inline std::vector<int32_t> make_prompt(uint64_t key, int64_t len, int32_t vocab) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < len; ++i) {
        p.push_back(static_cast<int32_t>(mix64(key * 1000 + static_cast<uint64_t>(i)) %
                                         static_cast<uint64_t>(vocab)));
    }
    return p;
}

}  // namespace tandem::engine::test
