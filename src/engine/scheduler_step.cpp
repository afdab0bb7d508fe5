// One step's middle: capacity and preemption, the plan, sampling and commit, and emission.
#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace tandem::engine {

// --- Capacity and preemption -----------------------------------------------------------------
//
// Every running request must hold capacity for all its known tokens before the step (its
// prompt was reserved at admission; each decode step adds one token). Oldest first; when the
// cache is full the newest running request is preempted, which may be the one asking. The
// oldest request can always grow: the context limit never exceeds the whole cache.

void scheduler::reserve_capacity() {
    for (size_t i = 0; i < running_.size(); ++i) {
        request& r = *running_[i];
        while (!capacity_->allocate(r.sequence, r.total_tokens())) {
            if (verifier_.holds_sequence()) {  // live work first: the check restarts later
                verifier_.release_sequence();
                continue;
            }
            TANDEM_CHECK_MSG(running_.size() > 1 || i > 0,
                             "a lone request does not fit in the cache");
            preempt_newest();
            if (i >= running_.size()) break;  // it was this one
        }
    }
}

void scheduler::preempt_newest() {
    std::unique_ptr<request> r = std::move(running_.back());
    running_.pop_back();
    release_sequence(*r, release_cause::preempted);
    transition(r->state, request_state::queued,
               fmt::format("preempted: cache full; {} tokens to recompute", r->total_tokens()));
    r->computed = 0;
    r->state_path = verify_path::plain;  // recomputed here from its tokens
    c_.preemptions.fetch_add(1);
    // At the front: it was admitted before everything still waiting. Several preemptions in
    // one step happen newest first, so the older ones end up ahead.
    waiting_.push_front(std::move(r));
}

// --- The plan --------------------------------------------------------------------------------

step_plan scheduler::build_plan() {
    step_plan plan;
    plan.step = step_no_;
    int64_t budget = opt_.max_prefill_tokens;
    int64_t logprob_budget = opt_.max_prompt_logprob_tokens;  // rows whose logits all come back
    for (const auto& rp : running_) {
        request& r = *rp;
        if (r.transferring()) continue;  // its prompt is being computed by a prefill engine
        const int64_t total = r.total_tokens();
        const int64_t remaining = total - r.computed;
        TANDEM_CHECK(remaining >= 1);
        const bool decoding = r.state.state == request_state::decoding;
        int64_t n = decoding ? 1 : std::min(remaining, budget);
        if (!decoding && r.wants_prompt_logprobs()) n = std::min(n, logprob_budget);
        // Prefix cache: a chunk ends on the next snapshot boundary (the same logits either way).
        if (!decoding && prefix_) n = std::min(n, prefix_->next_stop(r) - r.computed);
        if (n == 0) continue;  // prefill budget spent; it continues next step
        TANDEM_CHECK(!decoding || remaining == 1);
        plan_item item;
        item.request = r.id;
        item.sequence = r.sequence;
        item.start_position = r.computed;
        item.tokens.reserve(static_cast<size_t>(n));
        for (int64_t k = r.computed; k < r.computed + n; ++k) item.tokens.push_back(r.token_at(k));
        const bool reaches_end = r.computed + n == total;
        item.logits = r.wants_prompt_logprobs() ? logits_mode::all
                      : reaches_end             ? logits_mode::last
                                                : logits_mode::none;
        if (decoding) {
            plan.decode_tokens += 1;
        } else {
            plan.prefill_tokens += n;
            budget -= n;
            if (r.wants_prompt_logprobs()) logprob_budget -= n;
        }
        plan.items.push_back(std::move(item));
    }
    return plan;
}

// --- Sampling and commit -----------------------------------------------------------------------

void scheduler::sample_and_commit(const step_plan& plan, const step_output& out) {
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const plan_item& item = plan.items[i];
        request& r = *live_.at(item.request);
        const int64_t n = static_cast<int64_t>(item.tokens.size());
        if (item.logits == logits_mode::all) commit_prompt_logprobs(r, item, out, i);
        r.computed += n;
        if (prefix_) prefix_->after_step(r);
        if (r.computed < r.total_tokens()) {  // mid-prefill: nothing to sample yet
            if (r.prefill_progress) {
                // pd prefill side: complete pages travel while the next chunk computes.
                if (status st = r.prefill_progress(r.sequence, r.computed, false); !st.is_ok()) {
                    end_request(r, request_state::failed, finish_reason::error,
                                st.with_context("sending the prefilled state"),
                                "transfer send failed");
                }
            }
            continue;
        }
        TANDEM_CHECK(out.row_count[i] >= 1);
        const int64_t last = out.first_row[i] + out.row_count[i] - 1;
        commit_token(r, std::span<const float>(out.logits)
                            .subspan(static_cast<size_t>(last * out.vocab), out.vocab));
    }
}

void scheduler::commit_prompt_logprobs(request& r, const plan_item& item, const step_output& out,
                                       size_t index) {
    const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
    std::vector<float> lp(static_cast<size_t>(out.vocab));
    for (int64_t j = 0; j < out.row_count[index]; ++j) {
        // Row j holds the logits after position start + j: they score the token at + 1.
        const int64_t target = item.start_position + j + 1;
        if (target >= prompt_len || target != r.prompt_logprobs_next) continue;
        const int64_t row = out.first_row[index] + j;
        log_softmax(std::span<const float>(out.logits)
                        .subspan(static_cast<size_t>(row * out.vocab), out.vocab),
                    lp);
        const int32_t tok = r.prompt[static_cast<size_t>(target)];
        position_logprobs p;
        p.chosen = {tok, lp[static_cast<size_t>(tok)]};
        p.top = top_tokens(lp, std::max<int32_t>(r.params.logprobs, 0));
        r.prompt_logprobs.push_back(std::move(p));
        ++r.prompt_logprobs_next;
    }
}

namespace {

grammar::matcher& matcher_of(request& r) {
    if (!r.matcher) r.matcher = std::make_unique<grammar::matcher>(r.params.grammar);
    return *r.matcher;
}

bool allows_any(std::span<const uint32_t> mask, size_t vocab) {
    for (size_t w = 0; w < mask.size(); ++w) {
        uint32_t bits = mask[w];
        if (w + 1 == mask.size() && vocab % 32 != 0) bits &= (1u << (vocab % 32)) - 1u;
        if (bits != 0) return true;
    }
    return false;
}

}  // namespace

void scheduler::commit_token(request& r, std::span<const float> row) {
    sample_context ctx{r.prompt, r.output, r.seed, static_cast<uint64_t>(r.output.size())};
    std::span<const uint32_t> allowed;
    if (r.params.grammar) {
        allowed = matcher_of(r).next_mask();
        if (!allows_any(allowed, row.size())) {
            end_request(r, request_state::failed, finish_reason::error,
                        make_error(error_code::internal, "the output grammar allows no next token"),
                        "grammar dead end");
            return;
        }
    }
    sample_result s = sample_token(row, r.params, ctx, scratch_, allowed);
    if (r.verify) r.served.push_back({logits_digest(row), true, s.token, r.state_path});
    commit_sampled(r, s.token, std::move(s.logprobs));
}

// A token sampled here or, in pd, by the prefill engine (the first one): recorded, timed, and
// checked against every stop condition, identically in both topologies.
void scheduler::commit_sampled(request& r, int32_t token, position_logprobs&& logprobs) {
    const double now = this->now();
    if (r.first_token_s < 0) {
        r.first_token_s = now;
        ttft_.observe(now - r.submitted_s);
    } else {
        itl_.observe(now - r.last_token_s);
    }
    r.last_token_s = now;
    // The grammar follows every output token, the pd prefill engine's first one included;
    // a token it refuses means the two sides constrained differently.
    if (r.params.grammar && !matcher_of(r).accept(token)) {
        end_request(r, request_state::failed, finish_reason::error,
                    make_error(error_code::internal,
                               fmt::format("token {} breaks the request's output grammar", token)),
                    "grammar rejected a token");
        return;
    }
    r.output.push_back(token);
    if (r.params.logprobs >= 0) r.pending_logprobs.push_back(std::move(logprobs));
    c_.generated_tokens.fetch_add(1);
    if (r.state.state == request_state::prefilling) {
        transition(r.state, request_state::decoding, "prefill done, first token sampled");
    } else if (r.transferring()) {
        transition(r.state, request_state::decoding, "state landed verified, first token from prefill");
    }
    if (r.prefill_progress && r.output.size() == 1) {
        // pd prefill side: ship the rest of the prompt's state while the sequence holds it.
        if (status st = r.prefill_progress(r.sequence, r.computed, true); !st.is_ok()) {
            end_request(r, request_state::failed, finish_reason::error,
                        st.with_context("sending the prefilled state"), "transfer send failed");
            return;
        }
    }
    const auto& stops = r.params.stop_token_ids;
    const bool is_eos = !r.params.ignore_eos && token == eos_;
    if (is_eos || std::find(stops.begin(), stops.end(), token) != stops.end()) {
        r.stop_token = token;
        end_request(r, request_state::finished, finish_reason::stop, status::ok(),
                    is_eos ? "eos" : "stop token");
    } else if (static_cast<int64_t>(r.output.size()) >= r.params.max_tokens) {
        end_request(r, request_state::finished, finish_reason::length, status::ok(), "max_tokens");
    } else if (r.total_tokens() >= context_limit_) {
        end_request(r, request_state::finished, finish_reason::length, status::ok(),
                    "context limit");
    }
}

// --- Emission ----------------------------------------------------------------------------------
//
// Runs last, after stats are published: a sink may wake a client that immediately reads
// stats(), and must see this step's effects. Sinks run on this thread and must not block.

namespace {

token_event make_event(request& r) {
    token_event ev;
    ev.id = r.id;
    ev.tokens.assign(r.output.begin() + static_cast<std::ptrdiff_t>(r.emitted), r.output.end());
    r.emitted = r.output.size();
    ev.logprobs = std::move(r.pending_logprobs);
    r.pending_logprobs.clear();
    if (!r.prompt_logprobs_sent && r.params.prompt_logprobs &&
        (!ev.tokens.empty() || is_terminal(r.state.state))) {
        ev.prompt_logprobs = std::move(r.prompt_logprobs);
        r.prompt_logprobs_sent = true;
    }
    ev.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    ev.completion_tokens = static_cast<int64_t>(r.output.size());
    return ev;
}

}  // namespace

void scheduler::emit() {
    for (auto& r : running_) {
        if (r->output.size() > r->emitted) r->sink(make_event(*r));
    }
    std::vector<std::unique_ptr<request>> ended;
    ended.swap(ended_);
    const double now = this->now();
    for (auto& r : ended) {
        token_event ev = make_event(*r);
        ev.finished = true;
        ev.reason = r->reason;
        ev.error = r->error;
        ev.stop_token = r->stop_token;
        e2e_.observe(now - r->submitted_s);
        live_.erase(r->id);
        in_flight_.fetch_sub(1);
        r->sink(std::move(ev));
    }
}

}  // namespace tandem::engine
