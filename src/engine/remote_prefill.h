// engine/remote_prefill.h — How a decode scheduler has prompts prefilled elsewhere (pd topology).
//
// The decode side owns the request from start to end (design.md "One request, pd topology"):
// the scheduler admits it, gives it a sequence whose pages cover the prompt, and hands it to a
// remote_prefill, which ships the job to a prefill engine and lands the returned state in that
// sequence. When poll() reports the transfer complete, the scheduler commits the first token the
// prefill side sampled and the request decodes locally like any other; a failed transfer fails
// the request with the reason.
//
// Who frees the sequence: while a request is transferring, only the remote_prefill may drop the
// executor's sequence (a prefill engine may still be writing into its pages); the scheduler still
// returns the capacity it counted (capacity.h). The scheduler calls release() for every request
// that leaves the transferring state other than by completing, and never frees that sequence
// itself. The implementation frees it at once when no write can follow (the peer said so or is
// gone) and otherwise quarantines it until the peer acknowledges the abort or a lease expires
// (design invariant 2).
//
// Threading: every call below is made on the scheduler thread, except ready(), which any thread
// may ask (submit() answers 503 fast when no prefill engine is reachable). set_wake's callback is
// called from other threads (the transport's) whenever poll() has something to do.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/step_plan.h"

namespace tandem::engine {

// Why a transferring request gives its sequence back (the pd abort metrics count by it).
enum class release_cause { client, deadline, shutdown, error, preempted, peer_lost };
inline constexpr int k_release_causes = 6;

struct remote_prefill_job {
    request_id id = 0;
    sequence_id sequence = -1;          // holds capacity for exactly the prompt
    std::span<const int32_t> prompt;
    const sampling_params* params = nullptr;
    uint64_t seed = 0;                  // the request's resolved seed: same draws as single
};

struct remote_prefill_result {
    request_id id = 0;
    status error;                       // not ok: the transfer failed; the fields below are unset
    release_cause cause = release_cause::error;  // with an error: deadline, peer_lost or error
    int32_t first_token = 0;
    position_logprobs first_logprobs;   // meaningful when the request asked for logprobs
    std::vector<position_logprobs> prompt_logprobs;  // when asked: [0] placeholder, then 1..
};


class remote_prefill {
  public:
    virtual ~remote_prefill() = default;

    virtual void set_wake(std::function<void()> wake) = 0;
    // Why no prefill engine can take a job now, or nothing when one can. Any thread.
    virtual std::optional<std::string> unavailable() const = 0;
    // Sends the job. An error fails the request; the sequence is then the scheduler's again.
    virtual status start(const remote_prefill_job& job) = 0;
    // The request left the transferring state without completing (see the header comment).
    virtual void release(request_id id, sequence_id sequence, release_cause cause) = 0;
    // Lands arrived state, expires deadlines and leases; appends finished transfers to `out`.
    virtual void poll(std::vector<remote_prefill_result>& out) = 0;
    // Something is in flight or quarantined: the scheduler keeps polling instead of sleeping.
    // Called with the scheduler's inbox lock held: must not take a lock the wake callback's
    // callers hold (answer from scheduler-thread state or an atomic).
    virtual bool busy() const = 0;
};

}  // namespace tandem::engine
