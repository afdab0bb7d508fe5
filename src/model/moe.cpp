// model/moe.cpp — the MoE sublayer: hash or score routing, routed experts, shared expert.
//
// Op order follows HF transformers (the golden reference): sqrt(softplus) scores, selection by
// tid2eid[token] (hash layers) or top-k of score + bias, renormalized weights (+1e-20) times the
// routed scaling factor, SwiGLU with the gate clamped from above and up clamped both ways, the
// routing weight applied after w2, experts summed in ascending expert id, plus the shared expert.
// SwiGLU's exponential is exp_f32 (core/exp_f32.h, through cpu::swiglu), as on the GPU.
// numerics "official" applies the weight before w2 and renormalizes without the eps.
//
// Batched: the batch's (row, slot) pairs are grouped by expert, so each active expert's weights
// are read once per step for all the rows routed to it, and every expert's projections (with the
// shared expert's) run as one cpu::linear_group pass — three fork/joins per layer however many
// experts are active. A row's result does not depend on the grouping: each output element of a
// linear has one reduction order (cpu/kernels.h), and the experts are still summed per row in
// ascending id. Buffers live in moe_scratch and are only ever grown: a steady decode allocates
// nothing here.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/kernels.h"
#include "model/numerics.h"

#include "model/forward.h"

namespace tandem::model {

// The MoE sublayer's buffers (model_impl::moe_buf), reused across layers and steps. "Slot" s =
// r·k + j is row r's j-th routed expert; "expert order" lists the slots grouped by expert id
// (ascending), rows ascending inside a group.
struct moe_scratch {
    std::vector<float> logits;         // [T, E] router logits
    std::vector<int32_t> expert;       // [T·k] slot → expert id (ascending within a row)
    std::vector<float> weight;         // [T·k] slot → routing weight
    std::vector<int64_t> first;        // [E + 1] expert e's slots are expert-order positions [first[e], first[e+1])
    std::vector<int64_t> slot_at;      // [T·k] expert-order position → slot
    std::vector<int64_t> position_of;  // [T·k] slot → expert-order position
    std::vector<float> xe, xe_q;       // [T·k, d] inputs gathered in expert order (xe_q: FP8-simulated)
    std::vector<float> g, u, act;      // [T·k, I]
    std::vector<float> y;              // [T·k, d] expert outputs, expert order
    std::vector<float> x_q;            // [T, d] FP8-simulated input of the shared expert
    std::vector<float> sg, su, sact;   // [T, I] shared expert
    std::vector<float> shared;         // [T, d]
    std::vector<cpu::linear_job> jobs;
};

int64_t held_bytes(const moe_scratch& sc) {
    return held_bytes_of(sc.logits, sc.expert, sc.weight, sc.first, sc.slot_at, sc.position_of, sc.xe, sc.xe_q, sc.g,
                         sc.u, sc.act, sc.y, sc.x_q, sc.sg, sc.su, sc.sact, sc.shared, sc.jobs);
}

namespace {

float sqrt_softplus(float x) {
    const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus, threshold 20
    return std::sqrt(sp);
}

// Top-k of v (largest first, lower index first on ties) into idx.
void top_k(const std::vector<float>& v, int64_t k, std::vector<int32_t>& idx) {
    idx.resize(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return v[a] > v[b] || (v[a] == v[b] && a < b);
    });
    idx.resize(static_cast<size_t>(k));
}

// Fills sc.expert / sc.weight: per row its k experts in ascending id with their weights.
void route_tokens(model_impl& m, moe_scratch& sc, const moe_weights& mw, bool hash, const batch& b) {
    const int64_t E = m.cfg.n_routed_experts, k = m.cfg.num_experts_per_tok;
    const bool official = m.opt.numerics == numerics_mode::official;
    fit(sc.expert, b.rows * k);
    fit(sc.weight, b.rows * k);
    m.pool->parallel_for(b.rows, 1, [&](int64_t r0, int64_t r1) {
        thread_local std::vector<float> s, biased;
        thread_local std::vector<int32_t> sel;
        thread_local std::vector<std::pair<int32_t, float>> rt;
        s.resize(static_cast<size_t>(E));
        biased.resize(static_cast<size_t>(E));
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t e = 0; e < E; ++e) {
                s[e] = sqrt_softplus(sc.logits[r * E + e]);
                biased[e] = hash ? s[e] : s[e] + mw.bias.ptr()[e];
            }
            if (hash) sel.assign(mw.tid2eid.begin() + b.token[r] * k, mw.tid2eid.begin() + (b.token[r] + 1) * k);
            else top_k(biased, k, sel);
            float sum = 0.0f;  // in selection order, as HF sums them
            for (int32_t e : sel) sum += s[e];
            const float denom = official ? sum : sum + 1e-20f;
            rt.clear();
            for (int32_t e : sel) rt.emplace_back(e, s[e] / denom * static_cast<float>(m.cfg.routed_scaling_factor));
            std::sort(rt.begin(), rt.end());
            for (int64_t j = 0; j < k; ++j) {
                sc.expert[static_cast<size_t>(r * k + j)] = rt[static_cast<size_t>(j)].first;
                sc.weight[static_cast<size_t>(r * k + j)] = rt[static_cast<size_t>(j)].second;
            }
        }
    });
}

// Expert order (a counting sort of the slots by expert, stable in the row) and the gathered inputs.
void group_by_expert(const model_impl& m, moe_scratch& sc, const std::vector<float>& x, int64_t T) {
    const int64_t E = m.cfg.n_routed_experts, k = m.cfg.num_experts_per_tok, d = m.cfg.hidden_size, S = T * k;
    sc.first.assign(static_cast<size_t>(E + 1), 0);
    for (int64_t s = 0; s < S; ++s) ++sc.first[static_cast<size_t>(sc.expert[static_cast<size_t>(s)] + 1)];
    for (int64_t e = 0; e < E; ++e) sc.first[static_cast<size_t>(e + 1)] += sc.first[static_cast<size_t>(e)];
    fit(sc.slot_at, S);
    fit(sc.position_of, S);
    // first[e] serves as expert e's fill cursor (ending at its group's end), then shifts back.
    for (int64_t s = 0; s < S; ++s) {
        const int32_t e = sc.expert[static_cast<size_t>(s)];
        const int64_t p = sc.first[static_cast<size_t>(e)]++;
        sc.slot_at[static_cast<size_t>(p)] = s;
    }
    for (int64_t e = E; e > 0; --e) sc.first[static_cast<size_t>(e)] = sc.first[static_cast<size_t>(e - 1)];
    sc.first[0] = 0;
    for (int64_t p = 0; p < S; ++p) sc.position_of[static_cast<size_t>(sc.slot_at[static_cast<size_t>(p)])] = p;
    // The gather runs on every thread: serial, a batch-16 step of `small` spent 1.7% of its time
    // here (64 rows × 4 KiB per layer) while the other thread waited.
    fit(sc.xe, S * d);
    m.pool->parallel_for(S, 8, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
            std::copy_n(&x[(sc.slot_at[static_cast<size_t>(p)] / k) * d], d, &sc.xe[p * d]);
    });
}

// numerics "official": the FP8-simulated copy of rows the FP8/FP4 weights read (else unused).
const float* quantized_rows(const std::vector<float>& x, int64_t rows, int64_t width, std::vector<float>& buf) {
    buf.assign(x.begin(), x.begin() + rows * width);
    for (int64_t r = 0; r < rows; ++r) act_quant_fp8(&buf[r * width], width);
    return buf.data();
}

cpu::linear_job job_for(const model_impl& m, const tensor& wt, const float* x, const float* x_q, int64_t rows,
                        float* y) {
    const bool quantize = m.opt.numerics == numerics_mode::official && wt.act_quant;
    return cpu::linear_job{quantize ? x_q : x, rows, wt.mat.cols, wt.mat, y, wt.mat.rows};
}

// Every active expert's w1 and w3 and the shared expert's, in one pass; then SwiGLU.
void run_gate_up(model_impl& m, moe_scratch& sc, const moe_weights& mw, const std::vector<float>& x, int64_t T) {
    const int64_t E = m.cfg.n_routed_experts, I = m.cfg.moe_intermediate_size, d = m.cfg.hidden_size;
    const int64_t S = T * m.cfg.num_experts_per_tok;
    const bool official = m.opt.numerics == numerics_mode::official;
    const float* xe_q = official ? quantized_rows(sc.xe, S, d, sc.xe_q) : nullptr;
    const float* x_q = official ? quantized_rows(x, T, d, sc.x_q) : nullptr;
    fit(sc.g, S * I);
    fit(sc.u, S * I);
    fit(sc.sg, T * I);
    fit(sc.su, T * I);
    sc.jobs.clear();
    // The shared expert first (see run_down).
    sc.jobs.push_back(job_for(m, mw.shared.w1, x.data(), x_q, T, sc.sg.data()));
    sc.jobs.push_back(job_for(m, mw.shared.w3, x.data(), x_q, T, sc.su.data()));
    for (int64_t e = 0; e < E; ++e) {
        const int64_t p0 = sc.first[static_cast<size_t>(e)], n = sc.first[static_cast<size_t>(e + 1)] - p0;
        if (n == 0) continue;
        const expert_weights& ew = mw.experts[static_cast<size_t>(e)];
        const float* xq = official ? xe_q + p0 * d : nullptr;
        sc.jobs.push_back(job_for(m, ew.w1, &sc.xe[p0 * d], xq, n, &sc.g[p0 * I]));
        sc.jobs.push_back(job_for(m, ew.w3, &sc.xe[p0 * d], xq, n, &sc.u[p0 * I]));
    }
    cpu::linear_group(*m.pool, sc.jobs);

    const float limit = static_cast<float>(m.cfg.swiglu_limit);
    fit(sc.act, S * I);
    fit(sc.sact, T * I);
    m.pool->parallel_for(S + T, 16, [&](int64_t i0, int64_t i1) {  // inline for a decode step
        for (int64_t i = i0; i < i1; ++i) {
            if (i >= S) {
                const int64_t r = i - S;
                cpu::swiglu(&sc.sg[r * I], &sc.su[r * I], I, limit, &sc.sact[r * I]);
                continue;
            }
            cpu::swiglu(&sc.g[i * I], &sc.u[i * I], I, limit, &sc.act[i * I]);
            if (official) {  // the routing weight before w2
                const float wgt = sc.weight[static_cast<size_t>(sc.slot_at[static_cast<size_t>(i)])];
                for (int64_t j = 0; j < I; ++j) sc.act[i * I + j] *= wgt;
            }
        }
    });
}

// Every active expert's w2 and the shared expert's, in one pass.
void run_down(model_impl& m, moe_scratch& sc, const moe_weights& mw, int64_t T) {
    const int64_t E = m.cfg.n_routed_experts, I = m.cfg.moe_intermediate_size, d = m.cfg.hidden_size;
    const int64_t S = T * m.cfg.num_experts_per_tok;
    const bool official = m.opt.numerics == numerics_mode::official;
    const float* act_q = official ? quantized_rows(sc.act, S, I, sc.g) : nullptr;     // g is free now
    const float* sact_q = official ? quantized_rows(sc.sact, T, I, sc.sg) : nullptr;  // sg too
    fit(sc.y, S * d);
    fit(sc.shared, T * d);
    sc.jobs.clear();
    // The shared expert first: it has every row of the step, so its units are the pass's
    // compute-heavy ones, and the routed experts' few-row units are memory-bound. Last, they made
    // the pass's final pieces — one thread computing while the other, done streaming, waited;
    // first, one thread computes them while the other streams, then both stream.
    sc.jobs.push_back(job_for(m, mw.shared.w2, sc.sact.data(), sact_q, T, sc.shared.data()));
    for (int64_t e = 0; e < E; ++e) {
        const int64_t p0 = sc.first[static_cast<size_t>(e)], n = sc.first[static_cast<size_t>(e + 1)] - p0;
        if (n == 0) continue;
        sc.jobs.push_back(job_for(m, mw.experts[static_cast<size_t>(e)].w2, &sc.act[p0 * I],
                                  official ? act_q + p0 * I : nullptr, n, &sc.y[p0 * d]));
    }
    cpu::linear_group(*m.pool, sc.jobs);
}

}  // namespace

void model_impl::moe(int64_t layer, const batch& b, const std::vector<float>& x, std::vector<float>& out) {
    const moe_weights& mw = w.layers[static_cast<size_t>(layer)].moe;
    const bool hash = cfg.layers[static_cast<size_t>(layer)].mlp == mlp_type::hash_moe;
    const int64_t d = cfg.hidden_size, k = cfg.num_experts_per_tok, T = b.rows;
    const bool weight_first = opt.numerics == numerics_mode::official;
    if (!moe_buf) moe_buf = std::make_shared<moe_scratch>();
    moe_scratch& sc = *moe_buf;
    linear(x, T, mw.gate, sc.logits);
    route_tokens(*this, sc, mw, hash, b);
    group_by_expert(*this, sc, x, T);
    run_gate_up(*this, sc, mw, x, T);
    run_down(*this, sc, mw, T);
    fit(out, T * d);
    // Row r: ((0 + w_1·y_1) + w_2·y_2 + …) + shared, in slot order (experts ascending), like HF's
    // index_add — through cpu::axpys (AVX2: the row in registers across slots) with each product
    // and sum rounded, the same per element as the scalar loop it replaced. Official numerics
    // applied the weight before w2: its slots go in with factor 1, as the shared expert does
    // (1·v is v exactly, so the sums are unchanged).
    pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
        thread_local std::vector<const float*> rows;
        thread_local std::vector<float> factors;
        rows.resize(static_cast<size_t>(k + 1));
        factors.resize(static_cast<size_t>(k + 1));
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t sl = 0; sl < k; ++sl) {
                const int64_t s = r * k + sl, p = sc.position_of[static_cast<size_t>(s)];
                rows[static_cast<size_t>(sl)] = &sc.y[p * d];
                factors[static_cast<size_t>(sl)] = weight_first ? 1.0f : sc.weight[static_cast<size_t>(s)];
            }
            rows[static_cast<size_t>(k)] = &sc.shared[r * d];
            factors[static_cast<size_t>(k)] = 1.0f;
            float* o = &out[r * d];
            std::fill(o, o + d, 0.0f);
            cpu::axpys(factors.data(), rows.data(), k + 1, o, d);
        }
    });
}

}  // namespace tandem::model
