#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "engine/rng.h"

namespace tandem::engine {

namespace {

// Below this a temperature means greedy (vLLM's epsilon): dividing by it would overflow.
constexpr double k_greedy_temperature = 1e-5;

bool in_vocab(int32_t t, size_t vocab) {
    return t >= 0 && static_cast<size_t>(t) < vocab;
}

// Token ids ordered by probability, best first, ties → lowest id (a total order, so the masks
// below never depend on how the sort breaks ties).
std::vector<int32_t> order_by_prob(const std::vector<double>& p) {
    std::vector<int32_t> ids(p.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(),
              [&p](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
    return ids;
}

void mask_top_k(std::vector<double>& p, const std::vector<int32_t>& order, int64_t k) {
    for (size_t i = static_cast<size_t>(k); i < order.size(); ++i) p[order[i]] = 0.0;
}

void mask_top_p(std::vector<double>& p, const std::vector<int32_t>& order, double top_p) {
    double total = 0.0;
    for (double v : p) total += v;
    double cumulative = 0.0;
    size_t i = 0;
    // Keep the smallest best-first prefix whose mass reaches top_p (at least one token).
    for (; i < order.size(); ++i) {
        cumulative += p[order[i]];
        if (cumulative >= top_p * total) break;
    }
    for (size_t j = i + 1; j < order.size(); ++j) p[order[j]] = 0.0;
}

}  // namespace

void apply_penalties(std::span<float> logits, const sampling_params& params,
                     const sample_context& ctx) {
    const size_t vocab = logits.size();
    if (params.repetition_penalty != 1.0) {
        std::vector<uint8_t> seen(vocab, 0);
        for (auto span : {ctx.prompt, ctx.output}) {
            for (int32_t t : span) {
                if (in_vocab(t, vocab)) seen[t] = 1;
            }
        }
        const float rp = static_cast<float>(params.repetition_penalty);
        for (size_t v = 0; v < vocab; ++v) {
            if (!seen[v]) continue;
            logits[v] = logits[v] > 0.0f ? logits[v] / rp : logits[v] * rp;
        }
    }
    if (params.presence_penalty != 0.0 || params.frequency_penalty != 0.0) {
        std::vector<int32_t> count(vocab, 0);
        for (int32_t t : ctx.output) {
            if (in_vocab(t, vocab)) ++count[t];
        }
        for (size_t v = 0; v < vocab; ++v) {
            if (count[v] == 0) continue;
            double d = count[v] * params.frequency_penalty + params.presence_penalty;
            logits[v] = static_cast<float>(logits[v] - d);
        }
    }
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed) {
    TANDEM_CHECK(allowed.size() * 32 >= logits.size());
    const float minus_inf = -std::numeric_limits<float>::infinity();
    for (size_t w = 0; w < allowed.size(); ++w) {
        const uint32_t bits = allowed[w];
        if (bits == ~0u) continue;
        const size_t end = std::min(logits.size(), (w + 1) * 32);
        for (size_t v = w * 32; v < end; ++v) {
            if (!((bits >> (v % 32)) & 1u)) logits[v] = minus_inf;
        }
    }
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
    TANDEM_CHECK(out.size() == logits.size());
    double max = -std::numeric_limits<double>::infinity();
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    const double log_z = max + std::log(sum);
    for (size_t i = 0; i < logits.size(); ++i) {
        out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_z);
    }
}

std::vector<token_logprob> top_tokens(std::span<const float> logprobs, int64_t k) {
    k = std::min<int64_t>(k, static_cast<int64_t>(logprobs.size()));
    if (k <= 0) return {};
    std::vector<int32_t> ids(logprobs.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return logprobs[a] != logprobs[b] ? logprobs[a] > logprobs[b] : a < b;
    });
    std::vector<token_logprob> out;
    out.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) out.push_back({ids[i], logprobs[ids[i]]});
    return out;
}

int32_t argmax(std::span<const float> logits) {
    TANDEM_CHECK(!logits.empty());
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[best]) best = i;  // strict: the first (lowest id) max wins
    }
    return static_cast<int32_t>(best);
}

std::vector<double> filtered_probs(std::span<const float> logits, const sampling_params& params) {
    const double inv_t = 1.0 / params.temperature;
    double max = -std::numeric_limits<double>::infinity();
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    std::vector<double> p(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        p[i] = std::exp((static_cast<double>(logits[i]) - max) * inv_t);
    }
    const bool use_top_k = params.top_k > 0 && params.top_k < static_cast<int64_t>(p.size());
    const bool use_top_p = params.top_p < 1.0;
    if (use_top_k || use_top_p) {
        std::vector<int32_t> order = order_by_prob(p);
        if (use_top_k) mask_top_k(p, order, params.top_k);
        if (use_top_p) mask_top_p(p, order, params.top_p);
    }
    if (params.min_p > 0.0) {
        // The best token has probability weight 1 here (max subtracted), so the threshold is
        // min_p itself in unnormalized units.
        for (double& v : p) {
            if (v < params.min_p) v = 0.0;
        }
    }
    return p;
}

namespace {

int32_t draw(const std::vector<double>& p, double u) {
    double total = 0.0;
    for (double v : p) total += v;
    const double target = u * total;
    double cumulative = 0.0;
    int32_t last_kept = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0.0) continue;
        last_kept = static_cast<int32_t>(i);
        cumulative += p[i];
        if (cumulative > target) return last_kept;
    }
    TANDEM_CHECK(last_kept >= 0);
    return last_kept;  // rounding left target at the very end
}

}  // namespace

sample_result sample_token(std::span<const float> logits, const sampling_params& params,
                           const sample_context& ctx, std::vector<float>& scratch,
                           std::span<const uint32_t> allowed) {
    scratch.assign(logits.begin(), logits.end());
    apply_penalties(scratch, params, ctx);
    if (!allowed.empty()) apply_token_mask(scratch, allowed);
    sample_result r;
    if (params.temperature < k_greedy_temperature) {
        r.token = argmax(scratch);
    } else {
        r.token = draw(filtered_probs(scratch, params), counter_uniform(ctx.seed, ctx.position));
    }
    if (params.logprobs >= 0) {
        log_softmax(logits, scratch);  // the raw distribution, see the header
        r.logprobs.chosen = {r.token, scratch[r.token]};
        r.logprobs.top = top_tokens(scratch, params.logprobs);
    }
    return r;
}

}  // namespace tandem::engine
