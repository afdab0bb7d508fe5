// Shadow verification: the canary's jobs, budget and comparison (see verifier.h).
#include "engine/verifier.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/log.h"
#include "engine/sampler.h"

namespace tandem::engine {

const char* verify_path_name(verify_path p) {
    switch (p) {
        case verify_path::plain: return "plain";
        case verify_path::pd_transfer: return "pd_transfer";
        case verify_path::prefix_cache: return "prefix_cache";
        case verify_path::host_tier: return "host_tier";
    }
    return "?";
}

const char* verify_skip_name(verify_skip s) {
    switch (s) {
        case verify_skip::budget: return "budget";
        case verify_skip::inflight: return "inflight";
        case verify_skip::unfinished: return "unfinished";
        case verify_skip::capacity: return "capacity";
        case verify_skip::error: return "error";
        case verify_skip::shutdown: return "shutdown";
    }
    return "?";
}

uint64_t logits_digest(std::span<const float> row) {
    return XXH3_64bits(row.data(), row.size_bytes());
}

namespace {

double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// The bucket holds this many seconds of max_tokens_per_second, so a burst of sampled requests
// after a quiet period is still checked.
constexpr double k_bucket_seconds = 10.0;

}  // namespace

shadow_verifier::shadow_verifier(verify_options opt, model_executor& exec, capacity& cap)
    : opt_(std::move(opt)), exec_(exec), cap_(cap), rng_(std::random_device{}()) {
    TANDEM_CHECK(opt_.max_inflight >= 1 && opt_.max_chunk_tokens >= 1);
}

bool shadow_verifier::draw() {
    if (opt_.sample_rate <= 0) return false;
    return opt_.sample_rate >= 1 || unit_(rng_) < opt_.sample_rate;
}

void shadow_verifier::skip(verify_skip why) {
    c_.skipped[static_cast<size_t>(why)].fetch_add(1);
}

bool shadow_verifier::take_budget(int64_t tokens) {
    if (opt_.max_tokens_per_second <= 0) return true;
    const double rate = static_cast<double>(opt_.max_tokens_per_second);
    const double cap = rate * k_bucket_seconds;
    const double now = now_seconds();
    bucket_ = bucket_at_s_ < 0 ? cap : std::min(cap, bucket_ + rate * (now - bucket_at_s_));
    bucket_at_s_ = now;
    if (static_cast<double>(tokens) > bucket_) return false;
    bucket_ -= static_cast<double>(tokens);
    return true;
}

void shadow_verifier::submit(verify_job_input&& in) {
    c_.sampled.fetch_add(1);
    if (!in.completed || in.output.empty()) return skip(verify_skip::unfinished);
    TANDEM_CHECK_MSG(in.served.size() == in.output.size(),
                     "a sampled request lost the record of a served token");
    if (static_cast<int64_t>(jobs_.size()) >= opt_.max_inflight) return skip(verify_skip::inflight);
    job j;
    j.tokens = in.prompt;
    j.tokens.insert(j.tokens.end(), in.output.begin(), in.output.end());
    j.tokens.pop_back();  // the last token was sampled, never fed
    if (!take_budget(static_cast<int64_t>(j.tokens.size()))) return skip(verify_skip::budget);
    j.in = std::move(in);
    jobs_.push_back(std::move(j));
    c_.inflight.store(static_cast<int64_t>(jobs_.size()));
}

void shadow_verifier::release_sequence() {
    if (sequence_ < 0) return;
    cap_.free(sequence_);
    exec_.free_sequence(sequence_);
    sequence_ = -1;
    if (!jobs_.empty()) jobs_.front().fed = 0;
}

void shadow_verifier::drop_all() {
    release_sequence();
    for (size_t i = 0; i < jobs_.size(); ++i) skip(verify_skip::shutdown);
    jobs_.clear();
    c_.inflight.store(0);
}

// The recompute feeds prompt ++ output minus the last token. The rows that matter are those
// after positions P-1 .. P+n-2 (P prompt tokens, n generated): row P-1+k is what generated
// token k was sampled from. Chunks before position P-1 ask for no logits, so the prompt costs
// only its forward pass; from P-1 on every row comes back and is compared.
void shadow_verifier::run_chunk(uint64_t step) {
    if (jobs_.empty()) return;
    job& j = jobs_.front();
    if (sequence_ < 0) {
        result<sequence_id> seq = exec_.new_sequence();
        if (!seq) {  // the engine is idle, so nothing will free a slot for it soon
            jobs_.pop_front();
            c_.inflight.store(static_cast<int64_t>(jobs_.size()));
            return skip(verify_skip::capacity);
        }
        sequence_ = *seq;
        j.fed = 0;
    }
    const int64_t prompt_len = static_cast<int64_t>(j.in.prompt.size());
    const int64_t total = static_cast<int64_t>(j.tokens.size());
    const int64_t first_row = prompt_len - 1;
    const bool rows = j.fed >= first_row;
    const int64_t end = std::min(j.fed + opt_.max_chunk_tokens, rows ? total : first_row);
    if (!cap_.allocate(sequence_, end)) {
        release_sequence();
        jobs_.pop_front();
        c_.inflight.store(static_cast<int64_t>(jobs_.size()));
        return skip(verify_skip::capacity);
    }
    step_plan plan;
    plan.step = step;
    plan_item item;
    item.request = j.in.id;
    item.sequence = sequence_;
    item.start_position = j.fed;
    item.tokens.assign(j.tokens.begin() + j.fed, j.tokens.begin() + end);
    item.logits = rows ? logits_mode::all : logits_mode::none;
    plan.items.push_back(std::move(item));
    if (status st = exec_.execute(plan, out_); !st.is_ok()) {
        TANDEM_LOG_WARN("verify: recomputing request {} failed: {}", j.in.trace_id, st.message());
        release_sequence();
        jobs_.pop_front();
        c_.inflight.store(static_cast<int64_t>(jobs_.size()));
        return skip(verify_skip::error);
    }
    c_.tokens.fetch_add(end - j.fed);
    const int64_t from = j.fed;
    j.fed = end;
    if (!rows) return;
    const int64_t diverged = first_divergence(j, from, out_);
    if (diverged >= 0 || j.fed == total) finish_front(diverged);
}

int64_t shadow_verifier::first_divergence(const job& j, int64_t first_position,
                                          const step_output& out) {
    const int64_t prompt_len = static_cast<int64_t>(j.in.prompt.size());
    const std::span<const float> all(out.logits);
    for (int64_t r = 0; r < out.row_count[0]; ++r) {
        const int64_t k = first_position + r - (prompt_len - 1);  // generated position
        const served_position& s = j.in.served[static_cast<size_t>(k)];
        const std::span<const float> row =
            all.subspan(static_cast<size_t>((out.first_row[0] + r) * out.vocab),
                        static_cast<size_t>(out.vocab));
        if (s.has_digest) {
            if (logits_digest(row) != s.digest) return k;
            continue;
        }
        // Sampled by another engine (pd: the prefill's first token): its row is not here, but
        // the sampler is a pure function of row, parameters, history and seed.
        const sample_context ctx{j.in.prompt,
                                 std::span<const int32_t>(j.in.output).first(static_cast<size_t>(k)),
                                 j.in.seed, static_cast<uint64_t>(k)};
        if (sample_token(row, j.in.params, ctx, scratch_).token != s.token) return k;
    }
    return -1;
}

void shadow_verifier::finish_front(int64_t diverged_at) {
    job& j = jobs_.front();
    if (diverged_at >= 0) report_divergence(j, diverged_at);
    c_.checks.fetch_add(1);
    release_sequence();
    jobs_.pop_front();
    c_.inflight.store(static_cast<int64_t>(jobs_.size()));
}

void shadow_verifier::report_divergence(const job& j, int64_t k) {
    const served_position& s = j.in.served[static_cast<size_t>(k)];
    c_.divergences[static_cast<size_t>(s.path)].fetch_add(1);
    const int64_t prompt_len = static_cast<int64_t>(j.in.prompt.size());
    std::string sources;
    switch (s.path) {
        case verify_path::pd_transfer:
            sources = fmt::format("the prompt's state (positions 0..{}) arrived by pd transfer "
                                  "[{}]; positions after it were computed here",
                                  prompt_len - 1, opt_.transferred_state_kinds);
            break;
        case verify_path::prefix_cache:
            sources = "a prefix of the prompt's state was reused from the prefix cache";
            break;
        case verify_path::host_tier:
            sources = "a prefix of the prompt's state was loaded from the host tier";
            break;
        case verify_path::plain:
            sources = "all state was computed on this engine (no transfer, no cache): a kernel, "
                      "batch-invariance or memory fault";
            break;
    }
    std::string line = fmt::format(
        "request {} (engine id {}) diverged at generated position {} (sequence position {}, "
        "served token {}) on path {}: {}",
        j.in.trace_id.empty() ? "-" : j.in.trace_id, j.in.id, k, prompt_len + k, s.token,
        verify_path_name(s.path), sources);
    TANDEM_LOG_WARN("verify: SILENT CORRUPTION: {}", line);
    std::lock_guard lock(last_mu_);
    last_divergence_ = std::move(line);
    last_position_ = k;
    last_path_ = s.path;
}

verify_report shadow_verifier::report() const {
    verify_report r;
    r.enabled = enabled();
    r.sampled = c_.sampled.load();
    r.checks = c_.checks.load();
    r.tokens_recomputed = c_.tokens.load();
    r.inflight = c_.inflight.load();
    for (int i = 0; i < k_verify_paths; ++i) r.divergences[i] = c_.divergences[i].load();
    for (int i = 0; i < k_verify_skips; ++i) r.skipped[i] = c_.skipped[i].load();
    std::lock_guard lock(last_mu_);
    r.last_divergence = last_divergence_;
    r.last_position = last_position_;
    r.last_path = last_path_;
    return r;
}

}  // namespace tandem::engine
