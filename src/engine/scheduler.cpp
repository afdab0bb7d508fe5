// The scheduler thread, its inbox, admission and request endings. Planning, sampling and
// emission are in scheduler_step.cpp.
#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/log.h"

namespace tandem::engine {

double monotonic_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

scheduler::scheduler(std::unique_ptr<model_executor> executor, std::unique_ptr<capacity> cap,
                     scheduler_options opt)
    : opt_(std::move(opt)),
      executor_(std::move(executor)),
      capacity_(std::move(cap)),
      remote_(opt_.remote),
      service_(opt_.service),
      prefix_(opt_.prefix),
      heartbeat_(opt_.loop_heartbeat ? opt_.loop_heartbeat
                                     : std::make_shared<heartbeat>("scheduler")),
      vocab_(executor_->vocab_size()),
      eos_(executor_->eos_token_id()),
      seed_rng_(std::random_device{}()),
      verifier_(opt_.verify, *executor_, *capacity_) {
    TANDEM_CHECK(opt_.max_running_requests > 0 && opt_.max_prefill_tokens > 0 && opt_.max_prompt_logprob_tokens > 0);
    int64_t limit = executor_->max_context_tokens();
    if (opt_.max_context_tokens > 0) limit = std::min(limit, opt_.max_context_tokens);
    // A request alone must always fit in the cache, or preemption could not guarantee progress.
    context_limit_ = std::min(limit, capacity_->max_tokens_per_request());
    publish_stats();
    auto kick = [this] {
        {
            std::lock_guard lock(inbox_mu_);
            kicked_ = true;
        }
        inbox_cv_.notify_one();
    };
    if (remote_) remote_->set_wake(kick);
    if (service_) service_->set_wake(kick);
    thread_ = std::thread([this] { run(); });
}

scheduler::~scheduler() {
    if (remote_) remote_->set_wake({});  // the transport must not wake a scheduler being destroyed
    if (service_) service_->set_wake({});
    begin_shutdown();
    thread_.join();
}

void scheduler::begin_shutdown() {
    {
        std::lock_guard lock(inbox_mu_);
        stopping_ = true;
    }
    inbox_cv_.notify_one();
}

// --- Submission (any thread) ---------------------------------------------------------------

status scheduler::validate(const submit_request& req) const {
    const sampling_params& p = req.params;
    if (!req.sink) return make_error(error_code::invalid_argument, "submit: no event sink");
    if (req.prompt.empty()) return make_error(error_code::invalid_argument, "prompt is empty");
    for (size_t i = 0; i < req.prompt.size(); ++i) {
        if (req.prompt[i] < 0 || req.prompt[i] >= vocab_) {
            return make_error(error_code::invalid_argument,
                              fmt::format("prompt token {} at position {} is outside the "
                                          "vocabulary [0, {})",
                                          req.prompt[i], i, vocab_));
        }
    }
    if (p.max_tokens < 1) {
        return make_error(error_code::invalid_argument,
                          fmt::format("max_tokens must be at least 1, got {}", p.max_tokens));
    }
    int64_t prompt = static_cast<int64_t>(req.prompt.size());
    if (prompt + p.max_tokens > context_limit_) {
        return make_error(error_code::invalid_argument,
                          fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context "
                                      "limit of {} tokens",
                                      prompt, p.max_tokens, context_limit_));
    }
    if (p.temperature < 0 || !(p.top_p > 0 && p.top_p <= 1) || p.top_k < 0 ||
        !(p.min_p >= 0 && p.min_p <= 1) || !(p.repetition_penalty > 0)) {
        return make_error(error_code::invalid_argument,
                          "sampling parameters out of range (temperature >= 0, top_p in (0, 1], "
                          "top_k >= 0, min_p in [0, 1], repetition_penalty > 0)");
    }
    return status::ok();
}

result<request_id> scheduler::submit(submit_request req) { return submit(std::move(req), {}); }

result<request_id> scheduler::submit(submit_request req, prefill_hook progress) {
    TANDEM_RETURN_IF_ERROR(validate(req));
    if (remote_) {
        // pd: without a reachable prefill engine the request could only wait; say so now (503).
        if (std::optional<std::string> why = remote_->unavailable()) {
            c_.rejected.fetch_add(1);
            return make_error(error_code::unavailable, *why);
        }
    }
    const int64_t limit = opt_.max_running_requests + opt_.max_queued_requests;
    if (in_flight_.fetch_add(1) >= limit) {
        in_flight_.fetch_sub(1);
        c_.rejected.fetch_add(1);
        return make_error(error_code::unavailable,
                          fmt::format("server busy: {} requests in flight (scheduler."
                                      "max_running_requests + max_queued_requests); retry later",
                                      limit));
    }
    auto r = std::make_unique<request>();
    r->id = next_id_.fetch_add(1);
    r->trace_id = std::move(req.trace_id);
    r->prompt = std::move(req.prompt);
    r->params = std::move(req.params);
    r->sink = std::move(req.sink);
    r->prefill_progress = std::move(progress);
    if (r->params.seed) {
        r->seed = *r->params.seed;
    } else {
        std::lock_guard lock(seed_mu_);
        r->seed = seed_rng_();
    }
    if (r->params.prompt_logprobs) {  // position 0: a placeholder, nothing predicts it
        r->prompt_logprobs.push_back({{r->prompt.front(), 0.0f}, {}});
    }
    r->submitted_s = now();
    request_id id = r->id;
    std::unique_lock lock(inbox_mu_);
    if (stopping_) {
        lock.unlock();
        in_flight_.fetch_sub(1);
        return make_error(error_code::unavailable, "engine is stopping");
    }
    inbox_.push_back({inbox_msg::kind::submit, id, std::move(r), {}});
    lock.unlock();
    inbox_cv_.notify_one();
    return id;
}

void scheduler::post(inbox_msg msg) {
    {
        std::lock_guard lock(inbox_mu_);
        if (stopping_) return;  // shutdown ends every request anyway
        inbox_.push_back(std::move(msg));
    }
    inbox_cv_.notify_one();
}

void scheduler::abort(request_id id) {
    post({inbox_msg::kind::abort, id, nullptr, {}});
}
void scheduler::finish(request_id id) {
    post({inbox_msg::kind::finish, id, nullptr, {}});
}

void scheduler::flush_prefix_cache(flush_callback done) {
    if (!prefix_) {
        engine::flush_prefix_cache(std::move(done));
        return;
    }
    {
        std::lock_guard lock(inbox_mu_);
        if (!stopping_) {
            inbox_.push_back({inbox_msg::kind::flush, 0, nullptr, std::move(done)});
            done = nullptr;
        }
    }
    inbox_cv_.notify_one();
    if (done) done(make_error(error_code::unavailable, "engine is stopping"));
}

engine_stats scheduler::stats() const {
    engine_stats s;
    s.queued = c_.queued.load();
    s.running = c_.running.load();
    s.pages_total = c_.pages_total.load();
    s.pages_free = c_.pages_free.load();
    s.preemptions = c_.preemptions.load();
    s.requests_finished = c_.finished.load();
    s.requests_aborted = c_.aborted.load();
    s.requests_failed = c_.failed.load();
    s.rejected_queue_full = c_.rejected.load();
    s.late_end_events = c_.late_end_events.load();
    s.prompt_tokens = c_.prompt_tokens.load();
    s.generated_tokens = c_.generated_tokens.load();
    s.steps = c_.steps.load();
    if (prefix_) {
        const prefix_cache_stats p = prefix_->stats();
        s.prefix = {true,          p.lookup_tokens,  p.hit_tokens,
                    p.cached_pages, p.snapshots,     p.snapshot_bytes,
                    p.evicted_pages, p.evicted_snapshots, p.restore_failures,
                    p.host_enabled, p.host_bytes_total, p.host_bytes_used,
                    p.host_loaded_pages, p.evicted_to_host, p.host_evictions,
                    p.host_load_seconds};
    }
    return s;
}

engine_metrics scheduler::metrics() const {
    return {stats(),         ttft_.snapshot(),      itl_.snapshot(),
            e2e_.snapshot(), step_time_.snapshot(), batch_size_.snapshot()};
}

// --- The loop (scheduler thread) -----------------------------------------------------------

void scheduler::run() {
    while (wait_for_work()) step();
    shutdown();
}

bool scheduler::wait_for_work() {
    std::unique_lock lock(inbox_mu_);
    for (;;) {
        if (stopping_) return false;
        if (!inbox_.empty() || kicked_ || !ended_.empty() || has_local_work()) break;
        if (idle_for_verification()) break;
        const bool transfers = remote_ && remote_->busy();
        // Queued requests with nothing running are always admissible (a lone request fits
        // the cache), so only an empty scheduler sleeps.
        if (!waiting_.empty() && !transfers) break;
        const bool holds = service_ && service_->busy();
        if (transfers || holds || !running_.empty() || !waiting_.empty()) {
            // Only transfers in flight (or quarantined or held pages): poll them for deadlines
            // and leases; a transport message wakes us sooner (kicked_).
            inbox_cv_.wait_for(lock, std::chrono::milliseconds(opt_.remote_poll_ms));
            break;
        }
        check_idle_integrity();
        heartbeat_->set_pending(false);
        inbox_cv_.wait(lock);
    }
    kicked_ = false;
    heartbeat_->set_pending(true);
    return true;
}

// A running request the model must compute this step (not waiting for a remote prefill).
bool scheduler::has_local_work() const {
    return std::any_of(running_.begin(), running_.end(),
                       [](const auto& r) { return !r->transferring(); });
}

// With no request left, nothing may hold cache or model state and no request may be lost:
// a leak found here is found at the step that went idle, not at the next overload.
void scheduler::check_idle_integrity() const {
    TANDEM_CHECK(waiting_.empty() && running_.empty() && ended_.empty());
    TANDEM_CHECK_MSG(live_.empty(), "a request is known but in no queue");
    TANDEM_CHECK_MSG(!verifier_.holds_sequence(), "a finished verification kept its sequence");
    const capacity_stats cs = capacity_->stats();
    TANDEM_CHECK_MSG(cs.sequences == 0 && cs.pages_free + cs.cached_pages == cs.pages_total,
                     "cache capacity leaked by an ended request");
    if (prefix_) {
        TANDEM_CHECK_MSG(!prefix_->holds_sequences() && prefix_->locked_nodes() == 0,
                         "the prefix cache still locks a path of an ended request");
        prefix_->tree().check_integrity();
    }
}

void scheduler::step() {
    ++step_no_;
    if (opt_.before_step) opt_.before_step(step_no_);
    if (int64_t ms = stall_ms_.exchange(0); ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    const double t0 = now();
    drain_inbox();
    poll_remote();
    if (service_) service_->poll();
    expire_queued();
    admit();
    reserve_capacity();
    step_plan plan = build_plan();
    if (!plan.items.empty()) {
        status st = executor_->execute(plan, out_);
        if (st.is_ok()) {
            sample_and_commit(plan, out_);
        } else {
            for (const plan_item& it : plan.items) {
                auto found = live_.find(it.request);
                if (found != live_.end() && !is_terminal(found->second->state.state)) {
                    end_request(*found->second, request_state::failed, finish_reason::error,
                                st.with_context("model step failed"), "model step failed");
                }
            }
        }
        c_.steps.fetch_add(1);
        step_time_.observe(now() - t0);
        batch_size_.observe(static_cast<double>(plan.items.size()));
    }
    sweep_ended();
    publish_stats();
    emit();
    // Shadow verification only on a step that computed nothing live, after this step's events
    // went out: a request arriving now waits for at most one verification chunk.
    if (plan.items.empty() && idle_for_verification()) {
        verifier_.run_chunk(step_no_);
        publish_stats();  // its pages, held or just returned
    }
    heartbeat_->beat();
}

bool scheduler::idle_for_verification() const {
    return verifier_.has_work() && running_.empty() && waiting_.empty();
}

void scheduler::drain_inbox() {
    std::vector<inbox_msg> msgs;
    {
        std::lock_guard lock(inbox_mu_);
        msgs.swap(inbox_);
    }
    for (inbox_msg& m : msgs) {
        if (m.what == inbox_msg::kind::submit) {
            c_.prompt_tokens.fetch_add(static_cast<int64_t>(m.req->prompt.size()));
            // pd prefill jobs are checked by the decode side, which sees the whole request.
            m.req->verify = !m.req->prefill_progress && verifier_.draw();
            live_[m.id] = m.req.get();
            waiting_.push_back(std::move(m.req));
        } else if (m.what == inbox_msg::kind::flush) {
            apply_flush(m.flushed);
        } else {
            apply_end_request(m.id, m.what == inbox_msg::kind::abort);
        }
    }
}

void scheduler::apply_end_request(request_id id, bool abort) {
    auto it = live_.find(id);
    if (it == live_.end()) return;  // unknown, or its final event was sent: nothing to end
    request& r = *it->second;  // already ended this step: end_request counts and drops it
    if (abort) {
        end_request(r, request_state::aborted, finish_reason::aborted, status::ok(),
                    "aborted by the client");
    } else {
        end_request(r, request_state::finished, finish_reason::stop, status::ok(),
                    "stopped by the API (stop string)");
    }
}

// Applied at a step boundary, before admission: refused while any request holds cache state.
void scheduler::apply_flush(const flush_callback& done) {
    result<int64_t> freed = prefix_->flush();
    if (freed) TANDEM_LOG_INFO("prefix cache flushed: {} pages freed", *freed);
    publish_stats();  // whoever `done` wakes may read stats() at once
    done(std::move(freed));
}

void scheduler::expire_queued() {
    const double t = now();
    const double limit_s = static_cast<double>(opt_.queue_timeout_ms) / 1000.0;
    for (const auto& r : waiting_) {
        // An aborted request stays in waiting_ until the next sweep: it has already ended.
        if (r->started || is_terminal(r->state.state) || t - r->submitted_s <= limit_s) continue;
        end_request(*r, request_state::failed, finish_reason::error,
                    make_error(error_code::deadline_exceeded,
                               fmt::format("request waited {:.0f} ms in the queue without "
                                           "starting (scheduler.queue_timeout_ms = {})",
                                           (t - r->submitted_s) * 1000.0, opt_.queue_timeout_ms)),
                    "queue timeout");
    }
}

void scheduler::admit() {
    sweep_ended();  // ended queued requests leave waiting_ before admission looks at it
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opt_.max_running_requests) {
        request& r = *waiting_.front();
        const int64_t need = r.total_tokens();
        // Leave one token per running request so their next decode step does not preempt
        // the request just admitted.
        if (!capacity_->can_admit(need, static_cast<int64_t>(running_.size()))) {
            if (!verifier_.holds_sequence()) break;
            verifier_.release_sequence();  // live work first: the check restarts later
            continue;
        }
        result<sequence_id> seq = executor_->new_sequence();
        if (!seq && verifier_.holds_sequence()) {
            verifier_.release_sequence();
            seq = executor_->new_sequence();
        }
        if (!seq) {
            if (running_.empty()) {
                end_request(r, request_state::failed, finish_reason::error,
                            seq.error().with_context("starting the request"), "no sequence");
                sweep_ended();
                continue;
            }
            break;  // wait for a running request to end
        }
        r.sequence = *seq;
        // pd: a fresh request's prompt is prefilled remotely; a preempted one that already
        // produced tokens is recomputed here (see scheduler_options::remote).
        const bool remote = remote_ && r.output.empty();
        // A cached prefix (shared pages + restored snapshot) is state the sequence now holds.
        r.computed = prefix_ && !remote ? prefix_->attach(r) : 0;
        if (r.computed > 0) {  // what shadow checks blame
            r.state_path = prefix_->loaded_from_host(r) ? verify_path::host_tier
                                                        : verify_path::prefix_cache;
        }
        TANDEM_CHECK(capacity_->allocate(r.sequence, need));
        if (remote && !start_remote(r)) {
            sweep_ended();
            continue;
        }
        if (!remote) {
            transition(r.state, request_state::prefilling,
                       r.started ? fmt::format("re-admitted: recompute {} tokens", need - r.computed)
                       : r.computed > 0
                           ? fmt::format("admitted: {} tokens from the prefix cache", r.computed)
                           : std::string("admitted"));
        }
        r.started = true;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
}

// --- pd decode side: remote prefill ----------------------------------------------------------

// False when the request ended instead (no prefill engine, or the job could not be sent).
bool scheduler::start_remote(request& r) {
    status st;
    if (std::optional<std::string> why = remote_->unavailable()) {
        st = make_error(error_code::unavailable, *why);
    } else {
        st = remote_->start({r.id, r.sequence, r.prompt, &r.params, r.seed});
    }
    if (st.is_ok()) {
        transition(r.state, request_state::transferring, "admitted: prefill job sent");
        return true;
    }
    end_request(r, request_state::failed, finish_reason::error,
                st.with_context("sending the prefill job"), "prefill job not sent");
    return false;
}

void scheduler::poll_remote() {
    if (!remote_) return;
    remote_results_.clear();
    remote_->poll(remote_results_);
    for (remote_prefill_result& res : remote_results_) {
        auto it = live_.find(res.id);
        if (it == live_.end() || !it->second->transferring()) continue;  // ended meanwhile
        request& r = *it->second;
        if (!res.error.is_ok()) {
            // Its prefill peer was lost but another is ready: the job goes to that one instead.
            if (res.cause == release_cause::peer_lost && !remote_->unavailable()) {
                requeue_transfer(r, res.error.message());
                continue;
            }
            end_request(r, request_state::failed, finish_reason::error,
                        res.error.with_context("prefill transfer failed"), "transfer failed",
                        res.cause);
            continue;
        }
        r.computed = static_cast<int64_t>(r.prompt.size());
        r.state_path = verify_path::pd_transfer;
        if (r.verify) r.served.push_back({0, false, res.first_token, r.state_path});
        if (r.params.prompt_logprobs) {
            r.prompt_logprobs = std::move(res.prompt_logprobs);
            r.prompt_logprobs_next = static_cast<int64_t>(r.prompt.size());
        }
        commit_sampled(r, res.first_token, std::move(res.first_logprobs));
    }
}

// Back to the front of the queue, as a preemption does; admission sends the job again.
void scheduler::requeue_transfer(request& r, const std::string& why) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&r](const auto& p) { return p.get() == &r; });
    TANDEM_CHECK(it != running_.end());
    std::unique_ptr<request> owned = std::move(*it);
    running_.erase(it);
    release_sequence(r, release_cause::peer_lost);
    transition(r.state, request_state::queued, "prefill job re-sent: " + why);
    r.computed = 0;
    waiting_.push_front(std::move(owned));
}

static release_cause cause_of_ending(request_state to, const status& err) {
    if (to != request_state::failed) return release_cause::client;  // abort or API stop
    if (err.code() == error_code::deadline_exceeded) return release_cause::deadline;
    if (err.code() == error_code::unavailable) return release_cause::shutdown;
    return release_cause::error;
}

// Drops a request's sequence; a transferring one goes back through the remote (it may still be
// written into by the prefill engine).
void scheduler::release_sequence(request& r, release_cause cause) {
    if (r.sequence < 0) return;
    capacity_->free(r.sequence);
    if (r.transferring()) {
        remote_->release(r.id, r.sequence, cause);
    } else {
        // Whatever ended it, the state of its computed tokens is valid: publish it.
        if (prefix_) prefix_->release(r, true);
        executor_->free_sequence(r.sequence);
    }
    r.sequence = -1;
}

bool scheduler::end_request(request& r, request_state to, finish_reason why, status err,
                            std::string reason, std::optional<release_cause> cause) {
    if (is_terminal(r.state.state)) {
        c_.late_end_events.fetch_add(1);
        return false;
    }
    release_sequence(r, cause ? *cause : cause_of_ending(to, err));
    if (r.verify) hand_to_verifier(r, to == request_state::finished);
    r.reason = why;
    r.error = std::move(err);
    transition(r.state, to, std::move(reason));
    if (to == request_state::finished) c_.finished.fetch_add(1);
    if (to == request_state::aborted) c_.aborted.fetch_add(1);
    if (to == request_state::failed) c_.failed.fetch_add(1);
    if (opt_.on_ended) opt_.on_ended(r);
    return true;
}

void scheduler::hand_to_verifier(request& r, bool completed) {
    r.verify = false;
    verify_job_input in;
    in.id = r.id;
    in.trace_id = r.trace_id;
    in.prompt = r.prompt;
    in.output = r.output;  // still needed here: the final event carries it
    in.params = r.params;
    in.seed = r.seed;
    in.served = std::move(r.served);
    in.completed = completed;
    verifier_.submit(std::move(in));
}

// Moves terminal requests out of waiting_ and running_ into ended_ (their final event is sent
// by emit()).
void scheduler::sweep_ended() {
    auto take = [this](auto& container) {
        auto keep = std::stable_partition(container.begin(), container.end(), [](const auto& r) {
            return !is_terminal(r->state.state);
        });
        for (auto it = keep; it != container.end(); ++it) ended_.push_back(std::move(*it));
        container.erase(keep, container.end());
    };
    take(waiting_);
    take(running_);
}

void scheduler::publish_stats() {
    capacity_stats cs = capacity_->stats();
    c_.queued.store(static_cast<int64_t>(waiting_.size()));
    c_.running.store(static_cast<int64_t>(running_.size()));
    c_.pages_total.store(cs.pages_total);
    c_.pages_free.store(cs.pages_free);
}

void scheduler::shutdown() {
    drain_inbox();
    auto fail_all = [this](auto& container) {
        for (auto& r : container) {
            if (is_terminal(r->state.state)) continue;
            end_request(*r, request_state::failed, finish_reason::error,
                        make_error(error_code::unavailable, "engine is stopping"), "shutdown");
        }
    };
    fail_all(waiting_);
    fail_all(running_);
    verifier_.drop_all();
    sweep_ended();
    publish_stats();
    emit();
    heartbeat_->set_pending(false);
}

}  // namespace tandem::engine
