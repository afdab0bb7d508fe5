// engine/verifier.h — Shadow verification: the silent-corruption canary (design invariant 13).
//
// Kernels are batch-invariant (invariant 8), so recomputing a finished request's prompt + output
// on a fresh local sequence — no transfer, no prefix cache, no host tier — must reproduce, bit
// for bit, every logits row its generated tokens were sampled from. For a sampled request the
// scheduler keeps a served_record: per generated position an XXH3-64 digest of the served row
// (keeping the rows themselves would cost vocab × 4 bytes per token) and which path fed the
// state that row was computed from. When the request finishes the record becomes a job here;
// a mismatch is a divergence, counted per path, logged with the request id and the first
// divergent position, and kept for /health.
//
// Priority (never delaying live work): a job computes only on steps where the scheduler has no
// request running or queued, one chunk of at most max_chunk_tokens per step, so a request that
// arrives meanwhile waits for at most one chunk. The job's sequence holds a slot and pages while
// live work runs; whenever admission or growth needs them the scheduler takes them back
// (release_sequence) instead of waiting or preempting, and the job later restarts from token 0.
// Under sustained load jobs wait; beyond max_inflight new samples are skipped and counted.
//
// Budget: at most max_inflight jobs pending or computing, and a token bucket refilled at
// max_tokens_per_second holding ten seconds' worth. A sampled request that does not fit is
// skipped with its reason — checks are never dropped silently.
//
// Threading: everything runs on the scheduler thread except report(), which any thread may call.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/capacity.h"
#include "engine/engine.h"
#include "engine/model_executor.h"
#include "engine/verify_report.h"

namespace tandem::engine {

struct verify_options {
    double sample_rate = 0.0;            // fraction of requests checked; 0 = off
    int64_t max_inflight = 8;            // jobs pending or computing
    int64_t max_tokens_per_second = 0;   // recompute budget; 0 = unlimited
    int64_t max_chunk_tokens = 32;       // tokens per verification step
    // Names of the state kinds a pd transfer carries (logged with a pd_transfer divergence).
    std::string transferred_state_kinds;
};

// One generated token as it was served.
struct served_position {
    uint64_t digest = 0;      // XXH3-64 of the raw logits row the token was sampled from
    bool has_digest = false;  // false: sampled elsewhere (pd: the first token, by the prefill)
    int32_t token = 0;
    verify_path path = verify_path::plain;
};

uint64_t logits_digest(std::span<const float> row);

// A finished request handed over for checking.
struct verify_job_input {
    request_id id = 0;
    std::string trace_id;
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    sampling_params params;
    uint64_t seed = 0;
    std::vector<served_position> served;  // one per output token
    bool completed = false;               // finished normally (not aborted or failed)
};

class shadow_verifier {
  public:
    // `exec` and `cap` are the scheduler's own; they must outlive the verifier.
    shadow_verifier(verify_options opt, model_executor& exec, capacity& cap);

    bool enabled() const { return opt_.sample_rate > 0; }
    // Whether a new request is checked (decided at submit so its rows get digests).
    bool draw();
    // A sampled request ended: queue it, or count why not.
    void submit(verify_job_input&& in);
    bool has_work() const { return !jobs_.empty(); }
    bool holds_sequence() const { return sequence_ >= 0; }
    // One chunk of the oldest job; compares and retires the job when its last row is in.
    void run_chunk(uint64_t step);
    // Gives the job's slot and pages back; the job restarts from its first token later.
    void release_sequence();
    // Shutdown: every pending job is counted as skipped.
    void drop_all();

    verify_report report() const;

  private:
    struct job {
        verify_job_input in;
        int64_t fed = 0;  // tokens of prompt ++ output whose state the sequence holds
        std::vector<int32_t> tokens;
    };

    bool take_budget(int64_t tokens);
    void skip(verify_skip why);
    // Row r of `out` holds the logits after sequence position `first_position + r`. Returns the
    // first generated position whose recomputed row disagrees with what was served, or -1.
    int64_t first_divergence(const job& j, int64_t first_position, const step_output& out);
    void finish_front(int64_t diverged_at);
    void report_divergence(const job& j, int64_t k);

    verify_options opt_;
    model_executor& exec_;
    capacity& cap_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> unit_{0.0, 1.0};
    std::deque<job> jobs_;
    sequence_id sequence_ = -1;  // of jobs_.front() while it computes
    double bucket_ = 0.0;
    double bucket_at_s_ = -1.0;
    step_output out_;
    std::vector<float> scratch_;

    struct counters {
        std::atomic<int64_t> sampled{0}, checks{0}, tokens{0}, inflight{0};
        std::array<std::atomic<int64_t>, k_verify_paths> divergences{};
        std::array<std::atomic<int64_t>, k_verify_skips> skipped{};
    };
    counters c_;
    mutable std::mutex last_mu_;
    std::string last_divergence_;
    int64_t last_position_ = -1;
    verify_path last_path_ = verify_path::plain;
};

}  // namespace tandem::engine
