// Property test of the request lifecycle (design invariant 12): seeded random schedules of every
// end event — client abort, disconnect (a second abort), API stop, queue timeout, transfer
// deadline, peer loss, preemption, a failed model step, shutdown and natural finish — delivered
// at step boundaries, in any order and to requests in any state (queued, transferring,
// prefilling, decoding, already ended). Each run checks that every accepted request ends exactly
// once with one reason, through legal state edges only, that its tokens are a prefix of (or, when
// it finished on its own, equal to) what it generates alone, and that no page or sequence leaks.
//
// Everything a run does happens on the scheduler thread, inside the before_step hook, against a
// clock that advances one millisecond per step: a run is a pure function of its seed. A failing
// seed is printed; TANDEM_LIFECYCLE_SEED=S TANDEM_LIFECYCLE_RUNS=1 replays it, and a larger
// TANDEM_LIFECYCLE_RUNS searches longer.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "engine_test_util.h"

using namespace tandem;
using namespace tandem::engine;
using namespace tandem::engine::test;

namespace {

int64_t env_int(const char* name, int64_t fallback) {
    const char* v = std::getenv(name);
    return v ? std::strtoll(v, nullptr, 10) : fallback;
}

// A remote prefill driven from the hook: jobs complete or fail only when the schedule says so.
// Scheduler thread only, except set_wake (constructor/destructor) and busy's atomic.
class scripted_remote final : public remote_prefill {
  public:
    explicit scripted_remote(fake_executor* exec) : exec_(exec) {}

    void set_wake(std::function<void()>) override {}  // every action happens on its thread
    std::optional<std::string> unavailable() const override {
        if (down_.load()) return std::string("no prefill peer connected (scripted loss)");
        return std::nullopt;
    }
    status start(const remote_prefill_job& job) override {
        if (down_.load()) return make_error(error_code::unavailable, "peer down (scripted)");
        jobs_[job.id] = {job.sequence, {job.prompt.begin(), job.prompt.end()}, *job.params,
                         job.seed};
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
        return status::ok();
    }
    void release(request_id id, sequence_id seq, release_cause) override {
        exec_->free_sequence(seq);
        jobs_.erase(id);
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
    }
    void poll(std::vector<remote_prefill_result>& out) override {
        for (auto& [id, action] : actions_) {
            auto it = jobs_.find(id);
            if (it == jobs_.end()) continue;  // ended (or preempted) meanwhile
            if (action.ok) {
                out.push_back(land(id, it->second));
                jobs_.erase(it);
            } else {
                remote_prefill_result r;
                r.id = id;
                r.error = make_error(action.code, "scripted transfer failure");
                r.cause = action.cause;
                out.push_back(std::move(r));
            }
        }
        actions_.clear();
        in_flight_.store(static_cast<int64_t>(jobs_.size()));
    }
    bool busy() const override { return in_flight_.load() > 0; }

    // The hook's verbs.
    std::vector<request_id> job_ids() const {
        std::vector<request_id> ids;
        for (const auto& [id, j] : jobs_) ids.push_back(id);
        return ids;
    }
    void complete(request_id id) { actions_.emplace_back(id, action{true}); }
    void fail(request_id id, error_code code, release_cause cause) {
        actions_.emplace_back(id, action{false, code, cause});
    }
    void set_down(bool down) { down_.store(down); }

  private:
    struct job {
        sequence_id seq;
        std::vector<int32_t> prompt;
        sampling_params params;
        uint64_t seed;
    };
    struct action {
        bool ok = true;
        error_code code = error_code::internal;
        release_cause cause = release_cause::error;
    };
    // What a prefill engine would ship: the prompt's state and the first token it samples.
    remote_prefill_result land(request_id id, const job& j) {
        exec_->land_prefix(j.seq, j.prompt);
        uint64_t h = fake_executor::k_empty_hash;
        for (int32_t t : j.prompt) h = fake_executor::extend_hash(h, t);
        std::vector<float> row(static_cast<size_t>(exec_->vocab_size())), scratch;
        fake_executor::logits_for_prefix_hash(h, row);
        const std::vector<int32_t> none;
        sample_result s = sample_token(row, j.params, {j.prompt, none, j.seed, 0}, scratch);
        remote_prefill_result r;
        r.id = id;
        r.first_token = s.token;
        r.first_logprobs = s.logprobs;
        return r;
    }

    fake_executor* exec_;
    std::map<request_id, job> jobs_;
    std::vector<std::pair<request_id, action>> actions_;
    std::atomic<bool> down_{false};
    std::atomic<int64_t> in_flight_{0};
};

// A page counter that can be told to refuse the next growth of a sequence that already holds
// pages, forcing a preemption at a chosen step (never at admission, never for a lone request).
class squeezable_capacity final : public capacity {
  public:
    squeezable_capacity(int64_t page_size, int64_t pages) : inner_(page_size, pages) {}
    int64_t max_tokens_per_request() const override { return inner_.max_tokens_per_request(); }
    bool can_admit(int64_t tokens, int64_t headroom) const override {
        return inner_.can_admit(tokens, headroom);
    }
    bool allocate(sequence_id id, int64_t tokens) override {
        if (squeeze_ && inner_.pages_held(id) > 0 && inner_.stats().sequences > 1) {
            squeeze_ = false;
            return false;
        }
        return inner_.allocate(id, tokens);
    }
    void free(sequence_id id) override { inner_.free(id); }
    capacity_stats stats() const override { return inner_.stats(); }
    void squeeze() { squeeze_ = true; }

  private:
    paged_capacity inner_;
    bool squeeze_ = false;  // scheduler thread only
};

// What the schedules exercised, over all runs: a property test that never reached a path
// proves nothing about it, so the test asserts each was reached.
struct coverage {
    int64_t preemptions = 0, late_end_events = 0, queue_timeouts = 0, transfer_deadlines = 0,
            peer_losses = 0, model_failures = 0, shutdowns = 0, aborted = 0, api_stops = 0,
            finished_alone = 0, refused = 0, resent = 0;
};

struct planned_request {
    std::vector<int32_t> prompt;
    sampling_params params;
    std::vector<int32_t> expected;  // alone, to the end
};

struct run_record {
    std::mutex mu;
    std::deque<collector> cols;  // by submission order
    std::map<request_id, std::pair<size_t, size_t>> index_of;  // → (collector, planned request)
    std::map<request_id, int> ended;  // on_ended calls per request
    std::vector<std::string> violations;
    int64_t accepted = 0;
    int64_t resent = 0;  // transfers re-sent after their peer was lost
    int64_t finals() {
        int64_t n = 0;
        for (auto& c : cols) {
            std::lock_guard lock(c.mu);
            n += c.finals;
        }
        return n;
    }
};

// The state history of an ended request must be a chain of legal edges from queued to exactly
// one terminal state, and its final fields must agree with that state.
void check_history(const request& r, run_record& rec) {
    std::string bad;
    int64_t resent = 0;
    request_state at = request_state::queued;
    for (const state_change& c : r.state.history) {
        if (c.from != at) bad = "history is not a chain";
        if (!can_transition(c.from, c.to)) bad = "illegal edge";
        if (c.reason.rfind("prefill job re-sent", 0) == 0) resent += 1;
        at = c.to;
    }
    if (!is_terminal(at) || at != r.state.state) bad = "does not end in its terminal state";
    const bool reason_ok =
        (at == request_state::finished &&
         (r.reason == finish_reason::stop || r.reason == finish_reason::length)) ||
        (at == request_state::aborted && r.reason == finish_reason::aborted) ||
        (at == request_state::failed && r.reason == finish_reason::error && !r.error.is_ok());
    if (!reason_ok) bad = "final reason disagrees with the state";
    std::lock_guard lock(rec.mu);
    rec.resent += resent;
    if (++rec.ended[r.id] > 1) bad = "ended twice";
    if (!bad.empty()) rec.violations.push_back(fmt::format("request {}: {}", r.id, bad));
}

void run_schedule(uint64_t seed, coverage& cov) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto pick = [&rng](int64_t lo, int64_t hi) {  // inclusive
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    auto chance = [&rng](double p) { return std::uniform_real_distribution<double>()(rng) < p; };

    fake_executor_options fo;
    fo.fail_step = chance(0.1) ? pick(1, 40) : 0;
    const bool pd = chance(0.5);
    const int64_t page_size = 4;
    const int64_t pages = pick(12, 48);
    auto exec = std::make_unique<fake_executor>(fo);
    fake_executor* ex = exec.get();
    auto cap = std::make_unique<squeezable_capacity>(page_size, pages);
    squeezable_capacity* cp = cap.get();
    auto remote = pd ? std::make_shared<scripted_remote>(ex) : nullptr;

    std::atomic<int64_t> clock_ms{0};
    std::atomic<bool> go{false};
    run_record rec;
    std::unique_ptr<scheduler> eng;
    const int n_initial = static_cast<int>(pick(1, 10));
    const int n_total = n_initial + static_cast<int>(pick(0, 6));
    std::vector<planned_request> plan;
    for (int i = 0; i < n_total; ++i) {
        planned_request p;
        p.prompt = make_prompt(seed * 131 + static_cast<uint64_t>(i), pick(1, 20), fo.vocab);
        p.params.max_tokens = pick(1, 24);
        p.params.ignore_eos = chance(0.7);
        if (chance(0.5)) {
            p.params.temperature = 0.0;
        } else {
            p.params.temperature = 0.9;
            p.params.seed = seed + static_cast<uint64_t>(i);
        }
        p.expected = reference_tokens(p.prompt, p.params, p.params.seed.value_or(0), fo);
        plan.push_back(std::move(p));
    }
    int64_t refused = 0;
    auto submit = [&](size_t i) {
        std::unique_lock lock(rec.mu);
        collector& col = rec.cols.emplace_back();
        lock.unlock();
        auto id = eng->submit({plan[i].prompt, plan[i].params, col.sink(), "p"});
        lock.lock();
        if (!id) {
            // Over the queue limit, or a prompt over the context limit: refused, never admitted.
            const error_code c = id.error().code();
            if (c != error_code::unavailable && c != error_code::invalid_argument) {
                rec.violations.push_back("unexpected submit error: " + id.error().message());
            }
            rec.cols.pop_back();
            ++refused;
            return;
        }
        rec.index_of[*id] = {rec.cols.size() - 1, i};
        ++rec.accepted;
    };

    // The schedule: at each step boundary up to `last_event_step`, each event with its chance.
    const int64_t last_event_step = pick(5, 60);
    const int64_t shutdown_step = chance(0.25) ? pick(1, last_event_step) : -1;
    const double p_event = 0.05 + 0.3 * std::uniform_real_distribution<double>()(rng);
    std::mt19937_64 step_rng(seed ^ 0xabcdef);
    size_t next_submit = static_cast<size_t>(n_initial);

    scheduler_options so;
    so.max_running_requests = pick(1, 6);
    so.max_queued_requests = pick(0, 8);
    so.max_prefill_tokens = pick(1, 32);
    so.queue_timeout_ms = pick(1, 40);
    so.remote = remote;
    so.remote_poll_ms = 0;
    so.clock = [&clock_ms] { return static_cast<double>(clock_ms.load()) / 1000.0; };
    so.on_ended = [&rec](const request& r) { check_history(r, rec); };
    so.before_step = [&](uint64_t step) {
        while (!go.load()) std::this_thread::yield();
        clock_ms.fetch_add(1);
        const auto s = static_cast<int64_t>(step);
        if (s > last_event_step) {  // the finale: every transfer completes, nothing else happens
            if (remote) {
                remote->set_down(false);
                for (request_id id : remote->job_ids()) remote->complete(id);
            }
            return;
        }
        auto roll = [&](double p) { return std::uniform_real_distribution<double>()(step_rng) < p; };
        auto any_id = [&] {  // any id ever handed out, ended ones and one never used included
            return static_cast<request_id>(
                std::uniform_int_distribution<int64_t>(1, rec.accepted + 1)(step_rng));
        };
        if (roll(p_event)) eng->abort(any_id());                    // client abort
        if (roll(p_event / 2)) {  // a disconnect racing the client's own abort
            const request_id id = any_id();
            eng->abort(id);
            eng->abort(id);
        }
        if (roll(p_event / 2)) eng->finish(any_id());               // API stop (stop string)
        if (roll(p_event / 3)) clock_ms.fetch_add(so.queue_timeout_ms);  // everything queued expires
        if (roll(p_event)) cp->squeeze();                           // preemption
        if (next_submit < plan.size() && roll(0.3)) submit(next_submit++);
        if (remote) {
            for (request_id id : remote->job_ids()) {
                if (roll(p_event)) remote->complete(id);
                if (roll(p_event / 3)) {
                    remote->fail(id, error_code::deadline_exceeded, release_cause::deadline);
                }
            }
            if (roll(p_event / 4)) {  // peer loss: its jobs fail; with another peer ready they
                                      // are re-sent, else new ones cannot start for a while
                for (request_id id : remote->job_ids()) {
                    remote->fail(id, error_code::unavailable, release_cause::peer_lost);
                }
                remote->set_down(roll(0.5));
            } else if (roll(0.3)) {
                remote->set_down(false);
            }
        }
        if (s == shutdown_step) eng->begin_shutdown();
    };

    eng = std::make_unique<scheduler>(std::move(exec), std::move(cap), so);
    for (int i = 0; i < n_initial; ++i) submit(static_cast<size_t>(i));
    go.store(true);

    // Every accepted request ends, by itself or by the schedule, well within this bound; a
    // request still open after it was lost.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool all_final = false;
    while (std::chrono::steady_clock::now() < give_up) {
        {
            std::lock_guard lock(rec.mu);
            if (rec.finals() == rec.accepted) {
                all_final = true;
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    REQUIRE_MESSAGE(all_final, "a request never received its final event");
    const engine_stats st = eng->stats();
    CHECK(ex->live_sequences() == 0);
    CHECK(st.pages_free == st.pages_total);
    eng.reset();  // a request submitted by a late step ends here, with its final event

    std::lock_guard lock(rec.mu);
    for (const std::string& v : rec.violations) FAIL_CHECK(v);
    CHECK(static_cast<int64_t>(rec.ended.size()) == rec.accepted);
    CHECK(st.requests_finished + st.requests_aborted + st.requests_failed <= rec.accepted);
    for (auto& [id, where] : rec.index_of) {
        collector& c = rec.cols[where.first];
        const std::vector<int32_t>& alone = plan[where.second].expected;
        CAPTURE(id);
        std::lock_guard cl(c.mu);
        CHECK(c.finals == 1);
        CHECK(c.events_after_final == 0);
        // Whatever cut it short, what it produced is what it produces alone, so far; ended on
        // its own (max_tokens, EOS), it is all of it.
        REQUIRE(c.tokens.size() <= alone.size());
        CHECK(std::equal(c.tokens.begin(), c.tokens.end(), alone.begin()));
        const bool natural = c.last.reason == finish_reason::length ||
                             (c.last.reason == finish_reason::stop && c.last.stop_token >= 0);
        if (natural) CHECK(c.tokens.size() == alone.size());
        if (c.last.reason == finish_reason::error) CHECK_FALSE(c.last.error.message().empty());
        const std::string& why = c.last.error.message();
        auto has = [&why](const char* s) { return why.find(s) != std::string::npos; };
        cov.queue_timeouts += has("in the queue without starting");
        cov.transfer_deadlines += has("scripted transfer failure") && has("prefill transfer");
        cov.model_failures += has("injected failure");
        cov.shutdowns += has("engine is stopping");
        cov.aborted += c.last.reason == finish_reason::aborted;
        cov.api_stops += c.last.reason == finish_reason::stop && c.last.stop_token < 0;
        cov.finished_alone += natural;
    }
    cov.preemptions += st.preemptions;
    cov.late_end_events += st.late_end_events;
    cov.refused += refused;
    cov.resent += rec.resent;
}

}  // namespace

TEST_CASE("scheduler lifecycle: random end-event schedules end every request exactly once") {
    const int64_t runs = env_int("TANDEM_LIFECYCLE_RUNS", 3000);
    const uint64_t first = static_cast<uint64_t>(env_int("TANDEM_LIFECYCLE_SEED", 1));
    coverage cov;
    for (int64_t i = 0; i < runs; ++i) run_schedule(first + static_cast<uint64_t>(i), cov);
    MESSAGE(fmt::format("{} runs: {} preemptions, {} late end events, {} queue timeouts, {} "
                        "transfer failures, {} model-step failures, {} shut down, {} aborted, "
                        "{} API stops, {} finished alone, {} refused at submit, {} re-sent",
                        runs, cov.preemptions, cov.late_end_events, cov.queue_timeouts,
                        cov.transfer_deadlines, cov.model_failures, cov.shutdowns, cov.aborted,
                        cov.api_stops, cov.finished_alone, cov.refused, cov.resent));
    if (runs >= 1000) {
        CHECK(cov.preemptions > 0);
        CHECK(cov.late_end_events > 0);
        CHECK(cov.queue_timeouts > 0);
        CHECK(cov.transfer_deadlines > 0);
        CHECK(cov.model_failures > 0);
        CHECK(cov.shutdowns > 0);
        CHECK(cov.aborted > 0);
        CHECK(cov.api_stops > 0);
        CHECK(cov.finished_alone > 0);
        CHECK(cov.refused > 0);
        CHECK(cov.resent > 0);
    }
}
