#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/fake_executor.h"
#include "engine/rng.h"
#include "engine/sampler.h"

using namespace tandem::engine;

namespace {

std::vector<float> row_for(uint64_t key, int32_t vocab = 50) {
    std::vector<float> row(static_cast<size_t>(vocab));
    fake_executor::logits_for_prefix_hash(key, row);
    return row;
}

int32_t sample(const std::vector<float>& row, const sampling_params& p, uint64_t seed, uint64_t pos,
               std::vector<int32_t> prompt = {}, std::vector<int32_t> out = {}) {
    std::vector<float> scratch;
    return sample_token(row, p, {prompt, out, seed, pos}, scratch).token;
}

}  // namespace

TEST_CASE("sampler: greedy is the argmax, ties go to the lowest id") {
    sampling_params p;
    p.temperature = 0.0;
    std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
    CHECK(sample(row, p, 1, 0) == 1);
    for (uint64_t key = 0; key < 20; ++key) {
        auto r = row_for(key);
        int32_t best = 0;
        for (int32_t v = 1; v < 50; ++v) {
            if (r[v] > r[best]) best = v;
        }
        CHECK(sample(r, p, key * 7, key) == best);  // seed and position do not matter
    }
}

TEST_CASE("sampler: top_k keeps exactly the k best tokens") {
    auto row = row_for(3);
    sampling_params p;
    p.top_k = 5;
    auto probs = filtered_probs(row, p);
    auto top = top_tokens(row, 5);
    int kept = 0;
    for (size_t v = 0; v < probs.size(); ++v) {
        bool in_top = false;
        for (auto& t : top) in_top = in_top || t.token == static_cast<int32_t>(v);
        CHECK((probs[v] > 0) == in_top);
        kept += probs[v] > 0;
    }
    CHECK(kept == 5);
    // Every sample lands in the top 5.
    for (uint64_t s = 0; s < 200; ++s) {
        int32_t t = sample(row, p, s, 0);
        CHECK(probs[static_cast<size_t>(t)] > 0);
    }
}

TEST_CASE("sampler: top_p keeps the smallest best-first set reaching the mass") {
    // Probabilities 0.5, 0.25, 0.125, 0.125 (logits = log p).
    std::vector<float> row = {std::log(0.125f), std::log(0.5f), std::log(0.125f), std::log(0.25f)};
    sampling_params p;
    p.top_p = 0.7;  // 0.5 alone is short; 0.5 + 0.25 reaches it
    auto probs = filtered_probs(row, p);
    CHECK(probs[1] > 0);
    CHECK(probs[3] > 0);
    CHECK(probs[0] == 0);
    CHECK(probs[2] == 0);
    p.top_p = 0.1;  // the best token alone
    probs = filtered_probs(row, p);
    CHECK(probs[1] > 0);
    CHECK(probs[0] + probs[2] + probs[3] == 0);
}

TEST_CASE("sampler: min_p drops tokens below min_p * p(max)") {
    std::vector<float> row = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    sampling_params p;
    p.min_p = 0.25;  // threshold 0.125
    auto probs = filtered_probs(row, p);
    CHECK(probs[0] > 0);
    CHECK(probs[1] > 0);
    CHECK(probs[2] > 0);
    CHECK(probs[3] == 0);
}

TEST_CASE("sampler: repetition penalty follows HF (divide positive, multiply negative)") {
    std::vector<float> row = {2.0f, -1.0f, 3.0f, 1.0f};
    sampling_params p;
    p.repetition_penalty = 2.0;
    std::vector<int32_t> prompt = {0};
    std::vector<int32_t> out = {1, 1};
    apply_penalties(row, p, {prompt, out, 0, 0});
    CHECK(row[0] == doctest::Approx(1.0));   // in the prompt, positive → /2
    CHECK(row[1] == doctest::Approx(-2.0));  // in the output, negative → *2 (once, not per count)
    CHECK(row[2] == doctest::Approx(3.0));
    CHECK(row[3] == doctest::Approx(1.0));
    // Greedy flips when the penalty pushes the repeated leader below the next token.
    std::vector<float> lead = {3.0f, 2.0f};
    p.temperature = 0;
    std::vector<int32_t> none;
    CHECK(sample(lead, p, 0, 0, {0}, none) == 1);
    p.repetition_penalty = 1.0;
    CHECK(sample(lead, p, 0, 0, {0}, none) == 0);
}

TEST_CASE("sampler: presence and frequency penalties follow OpenAI over generated tokens only") {
    std::vector<float> row = {1.0f, 1.0f, 1.0f};
    sampling_params p;
    p.presence_penalty = 0.5;
    p.frequency_penalty = 0.25;
    std::vector<int32_t> prompt = {2, 2, 2};  // the prompt is not penalized
    std::vector<int32_t> out = {0, 0, 0, 1};
    apply_penalties(row, p, {prompt, out, 0, 0});
    CHECK(row[0] == doctest::Approx(1.0 - 3 * 0.25 - 0.5));
    CHECK(row[1] == doctest::Approx(1.0 - 0.25 - 0.5));
    CHECK(row[2] == doctest::Approx(1.0));
}

TEST_CASE("sampler: a seed gives the same token at a position, independent of anything else") {
    sampling_params p;
    p.temperature = 1.0;
    auto row = row_for(11);
    std::vector<int32_t> first;
    for (uint64_t pos = 0; pos < 50; ++pos) first.push_back(sample(row, p, 42, pos));
    // Same (seed, position) after other draws, in any order: same tokens.
    for (uint64_t pos = 50; pos-- > 0;) {
        (void)sample(row_for(pos), p, 7, pos);
        CHECK(sample(row, p, 42, pos) == first[pos]);
    }
    // A different seed gives a different sequence (50 draws over 50 tokens: all-equal is ~0).
    int same = 0;
    for (uint64_t pos = 0; pos < 50; ++pos) same += sample(row, p, 43, pos) == first[pos];
    CHECK(same < 50);
}

TEST_CASE("sampler: the sampled frequencies follow the distribution") {
    std::vector<float> row = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
    sampling_params p;
    std::map<int32_t, int> hits;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++hits[sample(row, p, 99, static_cast<uint64_t>(i))];
    CHECK(hits[0] / double(n) == doctest::Approx(0.6).epsilon(0.05));
    CHECK(hits[1] / double(n) == doctest::Approx(0.3).epsilon(0.07));
    CHECK(hits[2] / double(n) == doctest::Approx(0.1).epsilon(0.15));
    // Temperature sharpens: at 0.25 the leader gets (0.6^4)/(0.6^4+0.3^4+0.1^4) ≈ 0.94.
    p.temperature = 0.25;
    int lead = 0;
    for (int i = 0; i < 5000; ++i) lead += sample(row, p, 5, static_cast<uint64_t>(i)) == 0;
    CHECK(lead / 5000.0 > 0.9);
}

TEST_CASE("sampler: logprobs are the raw log-softmax, top list best first") {
    auto row = row_for(21);
    sampling_params p;
    p.temperature = 0.0;
    p.logprobs = 3;
    p.repetition_penalty = 5.0;  // changes the choice, not the reported distribution
    std::vector<float> scratch;
    std::vector<int32_t> prompt = {argmax(row)};
    auto r = sample_token(row, p, {prompt, {}, 0, 0}, scratch);
    CHECK(r.token != argmax(row));
    std::vector<float> lp(row.size());
    log_softmax(row, lp);
    double mass = 0;
    for (float v : lp) mass += std::exp(static_cast<double>(v));
    CHECK(mass == doctest::Approx(1.0).epsilon(1e-5));
    CHECK(r.logprobs.chosen.token == r.token);
    CHECK(r.logprobs.chosen.logprob == doctest::Approx(lp[static_cast<size_t>(r.token)]));
    REQUIRE(r.logprobs.top.size() == 3);
    CHECK(r.logprobs.top[0].token == argmax(row));
    CHECK(r.logprobs.top[0].logprob >= r.logprobs.top[1].logprob);
    CHECK(r.logprobs.top[1].logprob >= r.logprobs.top[2].logprob);
    p.logprobs = -1;
    CHECK(sample_token(row, p, {prompt, {}, 0, 0}, scratch).logprobs.top.empty());
}

TEST_CASE("rng: counter_uniform is in [0, 1) and roughly uniform") {
    double sum = 0;
    for (uint64_t i = 0; i < 10000; ++i) {
        double u = counter_uniform(1, i);
        CHECK(u >= 0.0);
        CHECK(u < 1.0);
        sum += u;
    }
    CHECK(sum / 10000 == doctest::Approx(0.5).epsilon(0.03));
    CHECK(counter_uniform(1, 5) == counter_uniform(1, 5));
    CHECK(counter_uniform(1, 5) != counter_uniform(2, 5));
}
