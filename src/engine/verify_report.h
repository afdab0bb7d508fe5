// engine/verify_report.h — What shadow verification (verifier.h) reports to /metrics and /health,
// and the vocabulary of paths and skip reasons its counters are labelled with.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tandem::engine {

// Where the state a logits row was computed from came from. Whoever fills a sequence's state
// from anywhere but its own forward pass tags the request (request::state_path): the pd decode
// side on a landed transfer; the prefix cache and the host tier when they reuse pages.
enum class verify_path : uint8_t { plain = 0, pd_transfer = 1, prefix_cache = 2, host_tier = 3 };
inline constexpr int k_verify_paths = 4;
const char* verify_path_name(verify_path p);

enum class verify_skip : uint8_t {
    budget = 0,      // the token bucket (verify.max_tokens_per_second) could not pay for it
    inflight = 1,    // verify.max_inflight jobs already pending or computing
    unfinished = 2,  // the sampled request was aborted, failed or generated nothing
    capacity = 3,    // no sequence slot or pages even with the engine idle
    error = 4,       // the recompute itself failed (the model step returned an error)
    shutdown = 5,    // the engine stopped with the job still pending
};
inline constexpr int k_verify_skips = 6;
const char* verify_skip_name(verify_skip s);

struct verify_report {
    bool enabled = false;
    int64_t sampled = 0;             // sampled requests that ended (checked or skipped)
    int64_t checks = 0;              // recomputations completed and compared
    int64_t tokens_recomputed = 0;
    int64_t inflight = 0;            // jobs pending or computing now
    std::array<int64_t, k_verify_paths> divergences{};
    std::array<int64_t, k_verify_skips> skipped{};
    std::string last_divergence;     // one line; empty while none
    int64_t last_position = -1;      // the last divergence's first divergent generated position
    verify_path last_path = verify_path::plain;

    int64_t total_divergences() const {
        int64_t n = 0;
        for (int64_t d : divergences) n += d;
        return n;
    }
};

}  // namespace tandem::engine
