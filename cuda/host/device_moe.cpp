// cuda/host/device_moe.cpp — the MoE sublayer of the device forward: K15 routing on the device, the
// grouping by expert on the host (routing results come back: a few bytes per token), K5 as one
// linear per expert over its gathered rows (the per-row math is `linear`, so a row's bytes do not
// depend on who else picked the expert), SwiGLU, the routing weight (before w2 in official
// numerics, after it in hf), K16 combine with the shared expert. model/moe.cpp is the reference.
#include "cuda/host/device_forward.h"

namespace tandem::cuda {

status device_forward::moe(int64_t layer, const step_metadata& meta, const float* x, float* out) {
    const dev_moe& mw = w_.layers[static_cast<size_t>(layer)].moe;
    const bool hash = cfg_.layers[static_cast<size_t>(layer)].mlp == model::mlp_type::hash_moe;
    const int64_t T = meta.rows, d = cfg_.hidden_size, I = cfg_.moe_intermediate_size, E = cfg_.n_routed_experts;
    const int32_t k = static_cast<int32_t>(cfg_.num_experts_per_tok);
    const float limit = static_cast<float>(cfg_.swiglu_limit);
    result<float*> logits = scratch<float>(b_scores, T * E), rw = scratch<float>(b_rt_w, T * k),
                   contrib = scratch<float>(b_contrib, T * k * d), shared = scratch<float>(b_shared, T * d),
                   g = scratch<float>(b_g, T * I), u = scratch<float>(b_u, T * I), act = scratch<float>(b_act, T * I),
                   xe = scratch<float>(b_xe, T * d), y = scratch<float>(b_y, T * d);
    for (auto* r : {&logits, &rw, &contrib, &shared, &g, &u, &act, &xe, &y})
        if (!*r) return r->error();
    result<int32_t*> re = scratch<int32_t>(b_rt_exp, T * k), ids = scratch<int32_t>(b_ids, T);
    if (!re) return re.error();
    if (!ids) return ids.error();

    TANDEM_RETURN_IF_ERROR(linear(x, T, mw.gate, *logits));
    TANDEM_RETURN_IF_ERROR(ops_.route(*logits, T, E, hash ? nullptr : mw.bias.p, hash ? mw.tid2eid : nullptr, *ids, k,
                                      official_, static_cast<float>(cfg_.routed_scaling_factor), *re, *rw));
    std::vector<int32_t> experts(static_cast<size_t>(T * k));
    std::vector<float> weights(static_cast<size_t>(T * k));
    TANDEM_RETURN_IF_ERROR(ops_.download(experts.data(), *re, T * k * 4));
    TANDEM_RETURN_IF_ERROR(ops_.download(weights.data(), *rw, T * k * 4));

    // Gather lists for every expert at once (rows ascending, as run_routed_experts): the source
    // row, the destination (row, slot) in contrib, and the routing weight.
    std::vector<int32_t> first(static_cast<size_t>(E + 1), 0), src, dst;
    std::vector<float> wts;
    for (int64_t e = 0; e < E; ++e) {
        first[e] = static_cast<int32_t>(src.size());
        for (int64_t r = 0; r < T; ++r)
            for (int32_t sl = 0; sl < k; ++sl)
                if (experts[r * k + sl] == e) {
                    src.push_back(static_cast<int32_t>(r));
                    dst.push_back(static_cast<int32_t>(r * k + sl));
                    wts.push_back(weights[r * k + sl]);
                }
    }
    first[E] = static_cast<int32_t>(src.size());
    if (static_cast<int64_t>(src.size()) != T * k)
        return make_error(error_code::internal, "MoE routing named an expert outside [0, n_routed_experts)");
    std::vector<int32_t> lists(src);
    lists.insert(lists.end(), dst.begin(), dst.end());
    result<int32_t*> dl = upload_scratch<int32_t>(b_rows, lists);
    if (!dl) return dl.error();
    result<float*> dw = upload_scratch<float>(b_weights, wts);
    if (!dw) return dw.error();
    const int32_t* d_src = *dl;
    const int32_t* d_dst = *dl + T * k;
    const bool weight_first = official_;
    for (int64_t e = 0; e < E; ++e) {
        const int64_t n = first[e + 1] - first[e], at = first[e];
        if (n == 0) continue;
        const dev_expert& ew = mw.experts[static_cast<size_t>(e)];
        TANDEM_RETURN_IF_ERROR(ops_.gather_rows(x, d, d_src + at, n, *xe));
        TANDEM_RETURN_IF_ERROR(linear(*xe, n, ew.w1, *g));
        TANDEM_RETURN_IF_ERROR(linear(*xe, n, ew.w3, *u));
        TANDEM_RETURN_IF_ERROR(ops_.swiglu(*g, *u, n * I, limit, *act));
        if (weight_first) TANDEM_RETURN_IF_ERROR(ops_.scale_rows(*act, n, I, *dw + at));
        TANDEM_RETURN_IF_ERROR(linear(*act, n, ew.w2, *y));
        if (!weight_first) TANDEM_RETURN_IF_ERROR(ops_.scale_rows(*y, n, d, *dw + at));
        TANDEM_RETURN_IF_ERROR(ops_.scatter_rows(*y, d, d_dst + at, n, *contrib));
    }
    TANDEM_RETURN_IF_ERROR(linear(x, T, mw.shared.w1, *g));
    TANDEM_RETURN_IF_ERROR(linear(x, T, mw.shared.w3, *u));
    TANDEM_RETURN_IF_ERROR(ops_.swiglu(*g, *u, T * I, limit, *act));
    TANDEM_RETURN_IF_ERROR(linear(*act, T, mw.shared.w2, *shared));
    return ops_.moe_combine(*contrib, T, k, d, *shared, out);
}

}  // namespace tandem::cuda
