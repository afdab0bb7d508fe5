// engine/engine.h — The engine as the API sees it: submit token prompts, receive token events,
// abort. Everything behind this header (scheduler thread, requests, pages, model) is owned by the
// engine; callers must not depend on how steps are planned.
//
// Threading: submit() and abort() are thread-safe and never block on a step. Events are
// delivered on the scheduler thread through the request's sink, which must not block (the API
// posts them to the HTTP loop). Every admitted request receives exactly one final event
// (finished = true) — with tokens, or with a reason it failed — nothing is lost.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/histogram.h"
#include "core/status.h"
#include "engine/verify_report.h"

namespace tandem::grammar {
class compiled;
}

namespace tandem::engine {

using request_id = uint64_t;

struct sampling_params {
    double temperature = 1.0;          // 0 = greedy
    double top_p = 1.0;                // nucleus mass, (0, 1]
    int64_t top_k = 0;                 // 0 = off
    double min_p = 0.0;                // drop tokens below min_p * p(max)
    double repetition_penalty = 1.0;   // > 1 discourages tokens already in prompt or output
    double presence_penalty = 0.0;     // OpenAI semantics, over generated tokens
    double frequency_penalty = 0.0;    // OpenAI semantics, over generated tokens
    std::optional<uint64_t> seed;      // same seed + same prompt → same tokens
    int64_t max_tokens = 16;           // generated tokens at most
    std::vector<int32_t> stop_token_ids;  // besides the model's EOS (unless ignore_eos)
    bool ignore_eos = false;
    int32_t logprobs = -1;             // -1: none; 0: the chosen token's; k: plus the top k
    bool prompt_logprobs = false;      // per-position logprobs of the prompt (echo)
    // Constrained decoding (src/grammar): the structural tag the output must match, as JSON
    // text (what a pd prefill peer receives and compiles), and the same compiled against this
    // engine's vocabulary. Both empty: the output is free.
    std::string grammar_spec;
    std::shared_ptr<const grammar::compiled> grammar;
};

enum class finish_reason {
    none,       // not finished
    stop,       // EOS, a stop token id, or the API asked to stop (stop string)
    length,     // max_tokens or the context limit
    aborted,    // the client or an operator cancelled it
    error,      // failed: `error` says why
};
const char* finish_reason_name(finish_reason r);

struct token_logprob {
    int32_t token = 0;
    float logprob = 0.0f;
};

struct position_logprobs {
    token_logprob chosen;              // the sampled (or prompt) token
    std::vector<token_logprob> top;    // the top-k alternatives, best first
};

struct token_event {
    request_id id = 0;
    std::vector<int32_t> tokens;                 // new tokens since the previous event
    std::vector<position_logprobs> logprobs;     // one per new token, when asked
    // Once, with the first event, when asked: one entry per prompt position, entry i scoring
    // prompt[i]. Entry 0 is a placeholder (token prompt[0], logprob 0, no top list): nothing
    // predicts the first token (OpenAI's null).
    std::vector<position_logprobs> prompt_logprobs;
    bool finished = false;
    finish_reason reason = finish_reason::none;
    status error;                                // set when reason == error
    // The EOS or stop_token_ids token that ended the request (reason == stop); it is the last
    // entry of `tokens` and counts in completion_tokens (as vLLM's token_ids), so the API can
    // leave it out of the text. -1 otherwise (max_tokens, stop string, abort, error).
    int32_t stop_token = -1;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;               // total so far
};

using event_sink = std::function<void(token_event&&)>;

struct submit_request {
    std::vector<int32_t> prompt;
    sampling_params params;
    event_sink sink;
    std::string trace_id;      // the HTTP request id, for logs
};

// Prefix cache counters (all 0 when the cache is off).
struct prefix_cache_counters {
    bool enabled = false;
    int64_t lookup_tokens = 0;       // tokens admissions needed
    int64_t hit_tokens = 0;          // of those, taken from the cache
    int64_t cached_pages = 0;        // pool pages the cache holds
    int64_t snapshots = 0;
    int64_t snapshot_bytes = 0;
    int64_t evicted_pages = 0;       // history family
    int64_t evicted_snapshots = 0;   // snapshot family
    int64_t restore_failures = 0;    // snapshots that failed verification (recomputed instead)
    // Host tier (cache.host_memory_bytes; all 0 when off).
    bool host_enabled = false;
    int64_t host_bytes_total = 0;
    int64_t host_bytes_used = 0;
    int64_t host_loaded_pages = 0;   // pages loaded back from host (host hits)
    int64_t evicted_to_host = 0;     // pool copies dropped while the host copy stayed
    int64_t host_evictions = 0;      // host copies dropped
    histogram_snapshot host_load_seconds;
};

struct engine_stats {
    int64_t queued = 0;
    int64_t running = 0;
    int64_t pages_total = 0;
    int64_t pages_free = 0;
    int64_t preemptions = 0;
    int64_t requests_finished = 0;
    int64_t requests_aborted = 0;
    int64_t requests_failed = 0;
    int64_t rejected_queue_full = 0;
    // End events (abort, timeout, failure, stop) that reached an already-ended request: dropped.
    int64_t late_end_events = 0;
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    int64_t steps = 0;
    prefix_cache_counters prefix;
};

// Latency and size distributions for /metrics (seconds; batch size in sequences).
struct engine_metrics {
    engine_stats stats;
    histogram_snapshot time_to_first_token;   // submit → first token sampled
    histogram_snapshot inter_token_latency;   // between consecutive tokens of one request
    histogram_snapshot end_to_end_latency;    // submit → final event
    histogram_snapshot step_time;             // one lockstep step with work (plan → commit)
    histogram_snapshot batch_size;            // sequences per executed step
};

class engine {
public:
    virtual ~engine() = default;
    // Errors: unavailable (queue full or stopping → 503), invalid_argument (prompt empty, over
    // the context limit, token id out of range → 400).
    virtual result<request_id> submit(submit_request req) = 0;
    // Idempotent; unknown or finished ids are ignored. The request's final event says aborted.
    virtual void abort(request_id id) = 0;
    // Ends the request as if a stop condition was met (stop strings detected by the API).
    virtual void finish(request_id id) = 0;
    virtual engine_stats stats() const = 0;
    virtual int64_t max_context_tokens() const = 0;
    virtual int32_t vocab_size() const = 0;
    virtual int32_t eos_token_id() const = 0;

    // stats() plus histograms; the default (engines without histograms) has empty ones.
    virtual engine_metrics metrics() const { return {stats(), {}, {}, {}, {}, {}}; }
    // Test/debug hook: the next step that has work sleeps `ms` first, with work pending, so the
    // scheduler heartbeat reports a stall (invariant 10 e2e test). 0 cancels a pending stall.
    virtual void inject_stall(int64_t ms) { (void)ms; }
    // POST /flush_cache: drops every cached prefix. `done` runs once (on the engine's thread, or
    // here when the engine has no cache) with the pages freed, or unavailable while requests
    // hold cache state.
    using flush_callback = std::function<void(result<int64_t>)>;
    virtual void flush_prefix_cache(flush_callback done) {
        done(make_error(error_code::invalid_argument, "the prefix cache is off (cache.prefix_cache)"));
    }
    // Shadow verification's counters and last divergence (verifier.h); empty when the engine
    // does not verify.
    virtual verify_report verification() const { return {}; }
};

}  // namespace tandem::engine
