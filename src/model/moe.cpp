// model/moe.cpp — the MoE sublayer: hash or score routing, routed experts, shared expert.
//
// Op order follows HF transformers (the golden reference): sqrt(softplus) scores, selection by
// tid2eid[token] (hash layers) or top-k of score + bias, renormalized weights (+1e-20) times the
// routed scaling factor, SwiGLU with the gate clamped from above and up clamped both ways, the
// routing weight applied after w2, experts summed in ascending expert id, plus the shared expert.
// numerics "official" applies the weight before w2 and renormalizes without the eps.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/forward.h"

namespace tandem::model {

namespace {

using route = std::vector<std::pair<int32_t, float>>;  // (expert id ascending, weight)

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float sqrt_softplus(float x) {
    const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus, threshold 20
    return std::sqrt(sp);
}

void swiglu(const float* g, const float* u, int64_t n, float limit, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu(std::min(g[i], limit)) * std::clamp(u[i], -limit, limit);
}

// Top-k of v (largest first, lower index first on ties).
std::vector<int32_t> top_k(const std::vector<float>& v, int64_t k) {
    std::vector<int32_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return v[a] > v[b] || (v[a] == v[b] && a < b);
    });
    idx.resize(static_cast<size_t>(k));
    return idx;
}

std::vector<route> route_tokens(model_impl& m, const moe_weights& mw, bool hash, const batch& b,
                                const std::vector<float>& logits) {
    const int64_t E = m.cfg.n_routed_experts, k = m.cfg.num_experts_per_tok;
    const bool official = m.opt.numerics == numerics_mode::official;
    std::vector<route> routes(static_cast<size_t>(b.rows));
    m.pool->parallel_for(b.rows, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> s(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t e = 0; e < E; ++e) {
                s[e] = sqrt_softplus(logits[r * E + e]);
                biased[e] = hash ? s[e] : s[e] + mw.bias.ptr()[e];
            }
            std::vector<int32_t> sel;
            if (hash) sel.assign(mw.tid2eid.begin() + b.token[r] * k, mw.tid2eid.begin() + (b.token[r] + 1) * k);
            else sel = top_k(biased, k);
            float sum = 0.0f;
            for (int32_t e : sel) sum += s[e];
            const float denom = official ? sum : sum + 1e-20f;
            route& rt = routes[static_cast<size_t>(r)];
            for (int32_t e : sel) rt.emplace_back(e, s[e] / denom * static_cast<float>(m.cfg.routed_scaling_factor));
            std::sort(rt.begin(), rt.end());
        }
    });
    return routes;
}

// Per row, the weighted output of each of its routed experts ([slots, d], ascending expert id).
std::vector<std::vector<float>> run_routed_experts(model_impl& m, const moe_weights& mw, const std::vector<route>& routes,
                                                   const std::vector<float>& x) {
    const int64_t d = m.cfg.hidden_size, I = m.cfg.moe_intermediate_size, T = static_cast<int64_t>(routes.size());
    const float limit = static_cast<float>(m.cfg.swiglu_limit);
    const bool weight_first = m.opt.numerics == numerics_mode::official;
    std::vector<std::vector<float>> contrib(static_cast<size_t>(T));
    for (int64_t r = 0; r < T; ++r) contrib[static_cast<size_t>(r)].assign(routes[static_cast<size_t>(r)].size() * d, 0.0f);
    for (int64_t e = 0; e < m.cfg.n_routed_experts; ++e) {
        std::vector<int64_t> rows, slots;  // gather the rows routed to expert e
        for (int64_t r = 0; r < T; ++r)
            for (size_t sl = 0; sl < routes[static_cast<size_t>(r)].size(); ++sl)
                if (routes[static_cast<size_t>(r)][sl].first == e) rows.push_back(r), slots.push_back(int64_t(sl));
        if (rows.empty()) continue;
        const int64_t n = static_cast<int64_t>(rows.size());
        auto weight_of = [&](int64_t i) { return routes[static_cast<size_t>(rows[i])][static_cast<size_t>(slots[i])].second; };
        std::vector<float> xe(static_cast<size_t>(n * d)), g, u, act(static_cast<size_t>(n * I)), y;
        for (int64_t i = 0; i < n; ++i) std::copy_n(&x[rows[i] * d], d, &xe[i * d]);
        const expert_weights& ew = mw.experts[static_cast<size_t>(e)];
        m.linear(xe, n, ew.w1, g);
        m.linear(xe, n, ew.w3, u);
        for (int64_t i = 0; i < n; ++i) {
            swiglu(&g[i * I], &u[i * I], I, limit, &act[i * I]);
            if (weight_first)
                for (int64_t j = 0; j < I; ++j) act[i * I + j] *= weight_of(i);
        }
        m.linear(act, n, ew.w2, y);
        for (int64_t i = 0; i < n; ++i) {
            float* dst = &contrib[static_cast<size_t>(rows[i])][static_cast<size_t>(slots[i] * d)];
            for (int64_t j = 0; j < d; ++j) dst[j] = weight_first ? y[i * d + j] : y[i * d + j] * weight_of(i);
        }
    }
    return contrib;
}

}  // namespace

void model_impl::moe(int64_t layer, const batch& b, const std::vector<float>& x, std::vector<float>& out) {
    const moe_weights& mw = w.layers[static_cast<size_t>(layer)].moe;
    const bool hash = cfg.layers[static_cast<size_t>(layer)].mlp == mlp_type::hash_moe;
    const int64_t d = cfg.hidden_size, I = cfg.moe_intermediate_size, T = b.rows;
    std::vector<float> logits;
    linear(x, T, mw.gate, logits);
    const std::vector<route> routes = route_tokens(*this, mw, hash, b, logits);
    const std::vector<std::vector<float>> contrib = run_routed_experts(*this, mw, routes, x);
    std::vector<float> g, u, act(static_cast<size_t>(T * I)), shared;
    linear(x, T, mw.shared.w1, g);
    linear(x, T, mw.shared.w3, u);
    for (int64_t r = 0; r < T; ++r) swiglu(&g[r * I], &u[r * I], I, static_cast<float>(cfg.swiglu_limit), &act[r * I]);
    linear(act, T, mw.shared.w2, shared);
    out.assign(static_cast<size_t>(T * d), 0.0f);
    for (int64_t r = 0; r < T; ++r) {
        const auto& cb = contrib[static_cast<size_t>(r)];
        const size_t nsel = routes[static_cast<size_t>(r)].size();
        for (int64_t j = 0; j < d; ++j) {
            float acc = 0.0f;  // 0 + e_first + e_second + … like HF's index_add in expert order
            for (size_t sl = 0; sl < nsel; ++sl) acc += cb[sl * d + j];
            out[r * d + j] = acc + shared[r * d + j];
        }
    }
}

}  // namespace tandem::model
