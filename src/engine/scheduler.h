// engine/scheduler.h — The lockstep scheduler: one thread that owns every request, the model
// executor and the cache capacity. Other threads only post messages (submit, abort, finish)
// through the inbox and receive token events through each request's sink.
//
// One step, in order, never overlapping the next (design invariant 6):
//   drain_inbox → expire_queued → admit → reserve_capacity → build_plan → execute →
//   sample_and_commit → emit
// Continuous batching: every step carries each decoding request's next token plus prefill
// chunks (oldest first) within max_prefill_tokens. Capacity: a request is admitted when its
// known tokens fit; before each step every running request is grown to cover its tokens and,
// when the cache is full, the NEWEST running request is preempted (state dropped, requeued at
// the front, recomputed later from prompt + output) so the oldest always progresses: no
// deadlock, and under greedy (or a seed) exactly the same tokens as without preemption.
// Abort and finish are applied at the step boundary (drain_inbox).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/histogram.h"
#include "core/liveness.h"
#include "engine/capacity.h"
#include "engine/engine.h"
#include "engine/model_executor.h"
#include "engine/prefix_cache.h"
#include "engine/remote_prefill.h"
#include "engine/request.h"
#include "engine/verifier.h"

namespace tandem::engine {

double monotonic_seconds();

// Work another component does on the scheduler thread because it touches this engine's pool,
// driven by events from other threads (pd prefill over one device: releasing source pages the
// decode engine has copied, topo/pd_holds.h). As remote_prefill: set_wake's callback is called from
// other threads; poll() runs on the scheduler thread at the start of every step; busy() is asked
// under the inbox lock (answer from an atomic).
class scheduler_service {
  public:
    virtual ~scheduler_service() = default;
    virtual void set_wake(std::function<void()> wake) = 0;
    virtual void poll() = 0;
    // It holds pool pages: the scheduler polls every remote_poll_ms instead of sleeping, and its
    // idle leak check waits until nothing is held.
    virtual bool busy() const = 0;
};

struct scheduler_options {
    int64_t max_running_requests = 64;
    // Requests accepted but not yet finished may number max_running + max_queued; beyond that
    // submit() answers unavailable (→ 503).
    int64_t max_queued_requests = 256;
    int64_t max_prefill_tokens = 2048;
    // Of those, tokens of requests that ask prompt logprobs: each such token's logits row comes
    // back, so this bounds a step's logits (model/step_memory.h) at vocab × 4 bytes a row.
    int64_t max_prompt_logprob_tokens = 256;
    int64_t max_context_tokens = 0;  // 0: the executor's maximum (also capped by the cache)
    int64_t queue_timeout_ms = 60000;
    std::shared_ptr<tandem::heartbeat> loop_heartbeat;  // null: a private one (tests)
    // Test hook, called on the scheduler thread at the start of every step with work.
    std::function<void(uint64_t step)> before_step;
    // pd decode side: prompts of new requests are prefilled by this (remote_prefill.h); null in
    // single topology and on the prefill side. A request preempted after it produced tokens is
    // recomputed locally (its tokens are then not a prompt a prefill engine could sample from).
    std::shared_ptr<remote_prefill> remote;
    // Null unless a component must touch the pool on this thread (see scheduler_service).
    std::shared_ptr<scheduler_service> service;
    // How often a scheduler with transfers in flight and nothing to compute polls them.
    int64_t remote_poll_ms = 2;
    // The prefix cache over this engine's pool (engine/prefix_cache.h); null = off.
    std::shared_ptr<prefix_cache> prefix;
    // Shadow verification ([verify]; verifier.h): recomputes sampled finished requests on steps
    // with nothing else to do. Off (sample_rate 0) by default and on the pd prefill side.
    verify_options verify;
    // Monotonic seconds for queue deadlines and latencies; null: monotonic_seconds(). Tests give
    // a clock that advances per step, so a deadline expires at a chosen step boundary.
    std::function<double()> clock;
    // Test hook, called on the scheduler thread when a request has ended, before its final event:
    // its state history can be checked edge by edge.
    std::function<void(const request&)> on_ended;
};

class scheduler final : public engine {
  public:
    scheduler(std::unique_ptr<model_executor> executor, std::unique_ptr<capacity> cap,
              scheduler_options opt);
    ~scheduler() override;  // fails every unfinished request (unavailable), joins the thread

    result<request_id> submit(submit_request req) override;
    // pd prefill side: `progress` is called on the scheduler thread after each prefill chunk
    // (computed = tokens whose state the sequence now holds; done = false), and once the prompt
    // is computed and the first token sampled (done = true), while the sequence still holds the
    // prompt's state and before the request's final event. It ships that state (complete pages
    // early, the rest at the end); an error fails the request.
    using prefill_hook = std::function<status(sequence_id, int64_t computed, bool done)>;
    result<request_id> submit(submit_request req, prefill_hook progress);
    void abort(request_id id) override;
    void finish(request_id id) override;
    engine_stats stats() const override;
    engine_metrics metrics() const override;
    int64_t max_context_tokens() const override { return context_limit_; }
    int32_t vocab_size() const override { return vocab_; }
    int32_t eos_token_id() const override { return eos_; }
    void inject_stall(int64_t ms) override { stall_ms_.store(ms); }
    void flush_prefix_cache(flush_callback done) override;
    verify_report verification() const override { return verifier_.report(); }
    // Asks the scheduler thread to stop after the step in progress; every unfinished request then
    // ends with an error (unavailable). The destructor does this and joins; calling it from a
    // before_step hook stops at exactly that step boundary (tests).
    void begin_shutdown();

    const std::shared_ptr<heartbeat>& loop_heartbeat() const { return heartbeat_; }

  private:
    struct inbox_msg {
        enum class kind { submit, abort, finish, flush } what;
        request_id id = 0;
        std::unique_ptr<request> req;  // submit only
        flush_callback flushed;        // flush only
    };

    // scheduler.cpp: thread, inbox, admission, endings.
    status validate(const submit_request& req) const;
    void post(inbox_msg msg);
    void run();
    bool wait_for_work();  // false when stopping
    void step();
    void drain_inbox();
    void apply_end_request(request_id id, bool abort);
    void apply_flush(const flush_callback& done);
    void expire_queued();
    void admit();
    bool start_remote(request& r);
    void poll_remote();
    void requeue_transfer(request& r, const std::string& why);
    void release_sequence(request& r, release_cause cause);
    bool has_local_work() const;
    double now() const { return opt_.clock ? opt_.clock() : monotonic_seconds(); }
    // The one way a request ends. A request that already ended is left as it is: the second end
    // event (an abort racing a timeout, a failure after a finish) is counted and dropped, so
    // each request ends exactly once with its first reason (design invariant 12).
    bool end_request(request& r, request_state to, finish_reason why, status err,
                     std::string reason, std::optional<release_cause> cause = std::nullopt);
    void sweep_ended();
    void shutdown();
    void publish_stats();
    void check_idle_integrity() const;
    bool idle_for_verification() const;
    void hand_to_verifier(request& r, bool completed);

    // scheduler_step.cpp: plan, preemption, sampling, emission.
    void reserve_capacity();
    void preempt_newest();
    step_plan build_plan();
    void sample_and_commit(const step_plan& plan, const step_output& out);
    void commit_prompt_logprobs(request& r, const plan_item& item, const step_output& out,
                                size_t index);
    void commit_token(request& r, std::span<const float> row);
    void commit_sampled(request& r, int32_t token, position_logprobs&& logprobs);
    void emit();

    scheduler_options opt_;
    std::unique_ptr<model_executor> executor_;
    std::unique_ptr<capacity> capacity_;
    std::shared_ptr<remote_prefill> remote_;
    std::shared_ptr<scheduler_service> service_;
    std::shared_ptr<prefix_cache> prefix_;
    std::shared_ptr<heartbeat> heartbeat_;
    int32_t vocab_ = 0;
    int32_t eos_ = -1;
    int64_t context_limit_ = 0;

    // Shared with submitting threads.
    std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::vector<inbox_msg> inbox_;
    bool stopping_ = false;  // under inbox_mu_
    bool kicked_ = false;    // under inbox_mu_: the remote has results for poll()
    std::atomic<request_id> next_id_{1};
    std::atomic<int64_t> in_flight_{0};  // accepted, final event not yet sent
    std::atomic<int64_t> stall_ms_{0};
    std::mutex seed_mu_;
    std::mt19937_64 seed_rng_;

    // Scheduler thread only.
    std::deque<std::unique_ptr<request>> waiting_;
    std::vector<std::unique_ptr<request>> running_;  // admission order: newest last
    std::vector<std::unique_ptr<request>> ended_;    // terminal, final event not yet sent
    std::unordered_map<request_id, request*> live_;
    uint64_t step_no_ = 0;
    step_output out_;             // reused every step: no per-step logits allocation
    std::vector<float> scratch_;  // the sampler's working row
    std::vector<remote_prefill_result> remote_results_;  // reused every step

    // Published for stats() (relaxed atomics: a scrape may mix two steps).
    struct counters {
        std::atomic<int64_t> queued{0}, running{0}, pages_total{0}, pages_free{0}, preemptions{0},
            finished{0}, aborted{0}, failed{0}, rejected{0}, prompt_tokens{0}, generated_tokens{0},
            steps{0}, late_end_events{0};
    };
    counters c_;
    histogram ttft_{histogram::latency_seconds_bounds()};
    histogram itl_{histogram::latency_seconds_bounds()};
    histogram e2e_{histogram::latency_seconds_bounds()};
    histogram step_time_{histogram::latency_seconds_bounds()};
    histogram batch_size_{histogram::power_of_two_bounds(1024)};
    // Uses executor_ and capacity_ (declared above, so built before and destroyed after it).
    shadow_verifier verifier_;

    std::thread thread_;  // last: starts after every member above exists
};

double monotonic_seconds();

}  // namespace tandem::engine
