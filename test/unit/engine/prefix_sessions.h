// Shared by the prefix-cache and host-tier engine tests: the engine config they start from, a
// bitwise comparison of a turn's tokens and logprobs, and the seeded multi-turn session workload.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <deque>

#include "core/config.h"
#include "core/config_test_helpers.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace tandem::engine::test {

inline config cache_config(const std::string& model_dir, bool prefix, int64_t chunk = 2048,
                    int64_t memory = int64_t{64} << 20) {
    auto cfg = load_config({});
    REQUIRE(cfg);
    config c = *cfg;
    c.model.path = model_dir;
    c.backend.threads = 2;
    c.cache.memory_bytes = memory;
    c.cache.page_size = 128;
    c.cache.prefix_cache = prefix;
    c.cache.snapshot_interval_tokens = 256;
    c.scheduler.max_running_requests = 8;
    c.scheduler.max_prefill_tokens = chunk;
    testing::no_verify(c);
    return c;
}

struct turn_result {
    std::vector<int32_t> tokens;
    std::vector<position_logprobs> logprobs;
    bool operator==(const turn_result& o) const {
        if (tokens != o.tokens || logprobs.size() != o.logprobs.size()) return false;
        for (size_t i = 0; i < logprobs.size(); ++i) {
            const auto& a = logprobs[i];
            const auto& b = o.logprobs[i];
            if (a.chosen.token != b.chosen.token ||
                std::memcmp(&a.chosen.logprob, &b.chosen.logprob, sizeof(float)) != 0 ||
                a.top.size() != b.top.size())
                return false;
            for (size_t k = 0; k < a.top.size(); ++k)
                if (a.top[k].token != b.top[k].token ||
                    std::memcmp(&a.top[k].logprob, &b.top[k].logprob, sizeof(float)) != 0)
                    return false;
        }
        return true;
    }
};

// A seeded agent-like workload: sessions sharing a system prompt, each turn's prompt = the
// previous prompt + its output + a new message; a regenerate and a branch of turn 2; several
// sessions in flight together.
inline std::vector<turn_result> run_sessions(tandem::engine::engine& eng, uint64_t seed, bool sampled) {
    const int32_t vocab = 5000;
    const std::vector<int32_t> system = make_prompt(seed, 170, vocab);
    sampling_params p;
    p.temperature = sampled ? 0.8 : 0.0;
    p.seed = seed;
    p.max_tokens = 45;
    p.ignore_eos = true;
    p.logprobs = 2;
    std::vector<turn_result> results;
    const int sessions = 3;
    std::vector<std::vector<int32_t>> history(sessions, system);
    for (int turn = 0; turn < 3; ++turn) {
        std::deque<collector> cols(sessions + 2);
        std::vector<std::vector<int32_t>> prompts;
        for (int s = 0; s < sessions; ++s) {
            auto msg = make_prompt(seed * 100 + uint64_t(s * 10 + turn), 30 + 17 * s, vocab);
            history[s].insert(history[s].end(), msg.begin(), msg.end());
            prompts.push_back(history[s]);
        }
        if (turn == 1) {
            prompts.push_back(history[0]);  // regenerate session 0's turn
            auto branch = history[1];
            branch.resize(branch.size() - 5);
            auto alt = make_prompt(seed + 777, 20, vocab);
            branch.insert(branch.end(), alt.begin(), alt.end());
            prompts.push_back(branch);      // a branch of session 1
        }
        for (size_t i = 0; i < prompts.size(); ++i) REQUIRE(eng.submit({prompts[i], p, cols[i].sink(), ""}));
        for (size_t i = 0; i < prompts.size(); ++i) {
            REQUIRE(cols[i].wait_final(120000));
            REQUIRE(cols[i].last.reason == finish_reason::length);
            results.push_back({cols[i].tokens, cols[i].logprobs});
            if (i < size_t(sessions)) {
                history[i].insert(history[i].end(), cols[i].tokens.begin(), cols[i].tokens.end());
            }
        }
    }
    return results;
}


}  // namespace tandem::engine::test
