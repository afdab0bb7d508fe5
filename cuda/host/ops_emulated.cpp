// cuda/host/ops_emulated.cpp — The phase-1 kernels' per-element math (kernel_math.h) run by
// host loops with the kernels' decomposition (one "thread" per output, the same serial parts),
// behind the same op signatures as the device (cuda_ops.h). CI runs the parity harness on it.
#include <string>
#include <vector>

#include "cuda/host/cuda_ops.h"
#include "cuda/host/kernel_paths.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

namespace {

status size_error(const char* what) { return make_error(error_code::invalid_argument, std::string(what) + ": wrong buffer size"); }

status emu_embed_expand(const k::weight_view& embed, std::span<const int32_t> ids, int64_t hc, std::span<float> h) {
    const int64_t T = static_cast<int64_t>(ids.size()), d = embed.cols;
    if (static_cast<int64_t>(h.size()) != T * hc * d) return size_error("K1 embed");
    for (int64_t t = 0; t < T; ++t) {
        if (ids[t] < 0 || ids[t] >= embed.rows) return make_error(error_code::out_of_range, "K1 embed: token id outside the vocabulary");
        for (int64_t e = 0; e < d; ++e)
            for (int64_t j = 0; j < hc; ++j) h[(t * hc + j) * d + e] = embed.at(ids[t], e);
    }
    return status::ok();
}

status emu_linear(std::span<const float> x, int64_t rows, const k::weight_view& w, std::span<float> y) {
    if (static_cast<int64_t>(x.size()) != rows * w.cols || static_cast<int64_t>(y.size()) != rows * w.rows)
        return size_error("linear");
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < w.rows; ++o) y[r * w.rows + o] = k::linear_output(&x[r * w.cols], w, o);
    return status::ok();
}

status emu_rms_norm(std::span<const float> x, int64_t rows, int64_t n, const float* weight, float eps, std::span<float> y) {
    if (static_cast<int64_t>(x.size()) != rows * n || y.size() != x.size()) return size_error("K3 rms_norm");
    for (int64_t r = 0; r < rows; ++r) {
        const float inv = k::rms_inverse(&x[r * n], n, eps);
        for (int64_t i = 0; i < n; ++i) y[r * n + i] = k::rms_apply(x[r * n + i], weight, i, inv);
    }
    return status::ok();
}

status emu_qdq_fp8(std::span<float> x, int64_t block, float amax_floor) {
    if (block <= 0) return make_error(error_code::invalid_argument, "qdq_fp8: block must be positive");
    const int64_t n = static_cast<int64_t>(x.size());
    for (int64_t b0 = 0; b0 < n; b0 += block) k::qdq_e4m3_block(&x[b0], n - b0 < block ? n - b0 : block, amax_floor);
    return status::ok();
}

status emu_rope(std::span<float> x, int64_t rows, int64_t heads, int64_t dim, std::span<const float> inv_freq,
                std::span<const int64_t> pos, bool inverse) {
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    if (static_cast<int64_t>(x.size()) != rows * heads * dim || static_cast<int64_t>(pos.size()) != rows || 2 * half > dim)
        return size_error("rope");
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < half; ++i)
                k::rope_pair(&x[(r * heads + h) * dim + dim - 2 * half], i, inv_freq[i], pos[r], inverse);
    return status::ok();
}

status emu_hc_pre(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                  std::span<const float> scale, std::span<float> collapsed, std::span<float> post, std::span<float> comb) {
    if (s.n < 1 || s.n > 8 || s.d <= 0) return make_error(error_code::invalid_argument, "K2 hc_pre: bad shape");
    const int64_t nd = s.n * s.d, T = static_cast<int64_t>(h.size()) / nd, n_mix = (2 + s.n) * s.n;
    if (static_cast<int64_t>(fn.size()) != n_mix * nd || static_cast<int64_t>(base.size()) != n_mix || scale.size() != 3 ||
        static_cast<int64_t>(collapsed.size()) != T * s.d || static_cast<int64_t>(post.size()) != T * s.n ||
        static_cast<int64_t>(comb.size()) != T * s.n * s.n)
        return size_error("K2 hc_pre");
    float mix[80], pre[8];
    for (int64_t t = 0; t < T; ++t) {
        const float* ht = &h[t * nd];
        const float inv = k::rms_inverse(ht, nd, s.norm_eps);
        for (int64_t j = 0; j < n_mix; ++j) {
            const float* f = &fn[j * nd];
            mix[j] = k::fixed_dot_fn([f](int64_t i) { return f[i]; }, [ht, inv](int64_t i) { return ht[i] * inv; }, nd);
        }
        k::hc_pre_weights(s.n, s.hc_eps, s.sinkhorn_iters, mix, base.data(), scale.data(), pre, &post[t * s.n],
                          &comb[t * s.n * s.n]);
        for (int64_t e = 0; e < s.d; ++e) collapsed[t * s.d + e] = k::hc_collapse(s.n, s.d, pre, ht, e);
    }
    return status::ok();
}

status emu_hc_post(int64_t n, int64_t d, std::span<const float> out, std::span<const float> h,
                   std::span<const float> post, std::span<const float> comb, std::span<float> h_new) {
    const int64_t T = d > 0 ? static_cast<int64_t>(out.size()) / d : 0;
    if (static_cast<int64_t>(h.size()) != T * n * d || static_cast<int64_t>(post.size()) != T * n ||
        static_cast<int64_t>(comb.size()) != T * n * n || h_new.size() != h.size())
        return size_error("K17 hc_post");
    for (int64_t t = 0; t < T; ++t)
        for (int64_t kk = 0; kk < n; ++kk)
            for (int64_t e = 0; e < d; ++e)
                h_new[(t * n + kk) * d + e] =
                    k::hc_post_element(n, d, &out[t * d], &h[t * n * d], &post[t * n], &comb[t * n * n], kk, e);
    return status::ok();
}

status emu_attention(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> keys,
                     int64_t max_keys, std::span<const int32_t> n_keys, std::span<const float> sinks, float scale,
                     std::span<float> out) {
    if (static_cast<int64_t>(q.size()) != tokens * heads * dim || static_cast<int64_t>(keys.size()) != tokens * max_keys * dim ||
        static_cast<int64_t>(n_keys.size()) != tokens || static_cast<int64_t>(sinks.size()) != heads || out.size() != q.size())
        return size_error("K13 attention");
    std::vector<float> logits(static_cast<size_t>(max_keys));
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t nk = n_keys[t];
        if (nk < 0 || nk > max_keys) return make_error(error_code::out_of_range, "K13 attention: key count outside [0, max_keys]");
        const float* kt = &keys[t * max_keys * dim];
        for (int64_t h = 0; h < heads; ++h) {
            const float* qh = &q[(t * heads + h) * dim];
            for (int64_t j = 0; j < nk; ++j) logits[j] = k::fixed_dot(qh, kt + j * dim, dim) * scale;
            const float denom = k::attention_softmax(logits.data(), nk, sinks[h]);
            for (int64_t e = 0; e < dim; ++e)
                out[(t * heads + h) * dim + e] =
                    k::attention_output_element(logits.data(), denom, nk, [kt, dim](int64_t j) { return kt + j * dim; }, e);
        }
    }
    return status::ok();
}

status emu_argmax(std::span<const float> logits, int64_t rows, int64_t vocab, std::span<int32_t> ids) {
    if (vocab <= 0 || static_cast<int64_t>(logits.size()) != rows * vocab || static_cast<int64_t>(ids.size()) != rows)
        return size_error("K18 argmax");
    for (int64_t r = 0; r < rows; ++r) {
        int64_t best = 0;
        for (int64_t v = 1; v < vocab; ++v)
            if (logits[r * vocab + v] > logits[r * vocab + best]) best = v;
        ids[r] = static_cast<int32_t>(best);
    }
    return status::ok();
}

status emu_route(std::span<const float> logits, int64_t tokens, int64_t experts, std::span<const float> bias,
                 std::span<const int32_t> tid2eid, std::span<const int32_t> token_ids, int32_t kk, bool official,
                 float scale, std::span<int32_t> expert_out, std::span<float> weight_out) {
    if (kk < 1 || kk > 16 || kk > experts) return make_error(error_code::invalid_argument, "K15 route: k outside [1, min(16, experts)]");
    if (static_cast<int64_t>(logits.size()) != tokens * experts || static_cast<int64_t>(expert_out.size()) != tokens * kk ||
        weight_out.size() != expert_out.size())
        return size_error("K15 route");
    const bool hash = !tid2eid.empty();
    if (hash && static_cast<int64_t>(token_ids.size()) != tokens) return size_error("K15 route: token ids");
    if (!hash && !bias.empty() && static_cast<int64_t>(bias.size()) != experts) return size_error("K15 route: bias");
    std::vector<float> s(static_cast<size_t>(experts)), b(s.size());
    int32_t sel[16];
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < experts; ++e) {
            s[e] = k::sqrt_softplus(logits[t * experts + e]);
            b[e] = !hash && !bias.empty() ? s[e] + bias[e] : s[e];
        }
        if (hash) {
            const int64_t vocab = static_cast<int64_t>(tid2eid.size()) / kk;
            if (token_ids[t] < 0 || token_ids[t] >= vocab) return make_error(error_code::out_of_range, "K15 route: token id outside tid2eid");
            for (int32_t i = 0; i < kk; ++i) {
                sel[i] = tid2eid[static_cast<int64_t>(token_ids[t]) * kk + i];
                if (sel[i] < 0 || sel[i] >= experts) return make_error(error_code::out_of_range, "K15 route: tid2eid names an unknown expert");
            }
        } else {
            k::route_top_k(b.data(), static_cast<int32_t>(experts), kk, sel);
        }
        k::route_weights(s.data(), sel, kk, official, scale, &expert_out[t * kk], &weight_out[t * kk]);
    }
    return status::ok();
}

status emu_swiglu(std::span<const float> g, std::span<const float> u, float limit, std::span<float> out) {
    if (u.size() != g.size() || out.size() != g.size()) return size_error("swiglu");
    for (size_t i = 0; i < g.size(); ++i) out[i] = k::swiglu(g[i], u[i], limit);
    return status::ok();
}

status emu_moe_combine(std::span<const float> contrib, int64_t tokens, int32_t slots, int64_t d,
                       std::span<const float> shared, std::span<float> out) {
    if (static_cast<int64_t>(contrib.size()) != tokens * slots * d || static_cast<int64_t>(shared.size()) != tokens * d ||
        out.size() != shared.size())
        return size_error("K16 combine");
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < d; ++j) {
            const float* c = &contrib[t * slots * d + j];
            out[t * d + j] = k::moe_combine_element([c, d](int32_t sl) { return c[sl * d]; }, slots, shared[t * d + j]);
        }
    return status::ok();
}

status emu_encode_rows(const k::row_codec& f, std::span<const float> values, std::span<uint8_t> rows) {
    if (f.dims <= 0 || f.bytes <= 0) return make_error(error_code::invalid_argument, "encode rows: empty row format");
    const int64_t n = static_cast<int64_t>(values.size()) / f.dims;
    if (static_cast<int64_t>(values.size()) != n * f.dims || static_cast<int64_t>(rows.size()) != n * f.bytes)
        return size_error("encode rows");
    for (int64_t r = 0; r < n; ++r) k::encode_row(f, &values[r * f.dims], &rows[r * f.bytes]);
    return status::ok();
}

status emu_decode_rows(const k::row_codec& f, std::span<const uint8_t> rows, std::span<float> values) {
    if (f.dims <= 0 || f.bytes <= 0) return make_error(error_code::invalid_argument, "decode rows: empty row format");
    const int64_t n = static_cast<int64_t>(rows.size()) / f.bytes;
    if (static_cast<int64_t>(rows.size()) != n * f.bytes || static_cast<int64_t>(values.size()) != n * f.dims)
        return size_error("decode rows");
    for (int64_t r = 0; r < n; ++r) k::decode_row(f, &rows[r * f.bytes], &values[r * f.dims]);
    return status::ok();
}

status emu_indexer_scores(std::span<const float> q, int64_t tokens, int64_t heads, int64_t dim, std::span<const float> w,
                          std::span<const float> keys, int64_t max_rows, std::span<const int32_t> n_rows, float idx_scale,
                          float head_scale, std::span<float> scores) {
    if (static_cast<int64_t>(q.size()) != tokens * heads * dim || static_cast<int64_t>(w.size()) != tokens * heads ||
        static_cast<int64_t>(keys.size()) != tokens * max_rows * dim || static_cast<int64_t>(n_rows.size()) != tokens ||
        static_cast<int64_t>(scores.size()) != tokens * max_rows)
        return size_error("K11 indexer");
    for (int64_t t = 0; t < tokens; ++t) {
        if (n_rows[t] < 0 || n_rows[t] > max_rows) return make_error(error_code::out_of_range, "K11 indexer: row count outside [0, max_rows]");
        for (int64_t row = 0; row < max_rows; ++row)
            scores[t * max_rows + row] = row < n_rows[t] ? k::indexer_score(&q[t * heads * dim], &keys[(t * max_rows + row) * dim],
                                                                             heads, dim, &w[t * heads], idx_scale, head_scale)
                                                         : 0.0f;
    }
    return status::ok();
}

status emu_compressor_pool(std::span<const float> rings, int64_t n, int64_t m, int64_t dim, bool overlap, std::span<float> out) {
    const int64_t slots = overlap ? 2 * m : m, F = 2 * (overlap ? 2 : 1) * dim;
    if (static_cast<int64_t>(rings.size()) != n * slots * F || static_cast<int64_t>(out.size()) != n * dim) return size_error("K9 pool");
    for (int64_t win = 0; win < n; ++win)
        for (int64_t e = 0; e < dim; ++e) out[win * dim + e] = k::compressor_pool_feature(&rings[win * slots * F], m, dim, overlap, e);
    return status::ok();
}

status emu_official_sim(official_sim kind, std::span<float> x, int64_t dim, int64_t nope) {
    if (dim <= 0 || (kind == official_sim::indexer_fp4 && (dim & (dim - 1)) != 0) || nope < 0 || nope > dim)
        return make_error(error_code::invalid_argument, "official simulation: bad row shape");
    const int64_t rows = static_cast<int64_t>(x.size()) / dim;
    if (rows * dim != static_cast<int64_t>(x.size())) return size_error("official simulation");
    for (int64_t r = 0; r < rows; ++r) {
        if (kind == official_sim::kv_fp8) k::kv_fp8_sim(&x[r * dim], nope, dim);
        else k::indexer_fp4_sim(&x[r * dim], dim);
    }
    return status::ok();
}

status emu_top_k(std::span<const float> scores, int64_t rows, int64_t ld, std::span<const int32_t> n_cand, int64_t kk,
                 std::span<int32_t> sel, std::span<int32_t> tied) {
    if (kk < 1) return make_error(error_code::invalid_argument, "K12 top-k: k must be at least 1");
    if (static_cast<int64_t>(scores.size()) != rows * ld || static_cast<int64_t>(n_cand.size()) != rows ||
        static_cast<int64_t>(sel.size()) != rows * kk || static_cast<int64_t>(tied.size()) != rows)
        return size_error("K12 top-k");
    for (int64_t r = 0; r < rows; ++r) {
        if (n_cand[r] < 0 || n_cand[r] > ld) return make_error(error_code::out_of_range, "K12 top-k: candidate count outside [0, ld]");
        tied[r] = k::top_k_row(&scores[r * ld], n_cand[r], kk, &sel[r * kk]) ? 1 : 0;
    }
    return status::ok();
}

status emu_hc_head(const hc_shape& s, std::span<const float> h, std::span<const float> fn, std::span<const float> base,
                   std::span<const float> scale, std::span<float> x) {
    if (s.n < 1 || s.n > 8 || s.d <= 0) return make_error(error_code::invalid_argument, "K18 hc_head: bad shape");
    const int64_t nd = s.n * s.d, T = static_cast<int64_t>(h.size()) / nd;
    if (T * nd != static_cast<int64_t>(h.size()) || static_cast<int64_t>(fn.size()) != s.n * nd ||
        static_cast<int64_t>(base.size()) != s.n || scale.size() != 1 || static_cast<int64_t>(x.size()) != T * s.d)
        return size_error("K18 hc_head");
    float pre[8];
    for (int64_t t = 0; t < T; ++t) {
        const float* ht = &h[t * nd];
        k::hc_head_weights(s.n, s.d, s.norm_eps, s.hc_eps, ht, fn.data(), base.data(), scale.data(), pre);
        for (int64_t e = 0; e < s.d; ++e) x[t * s.d + e] = k::hc_collapse(s.n, s.d, pre, ht, e);
    }
    return status::ok();
}

status emu_move_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst,
                     bool gather) {
    const int64_t rows = static_cast<int64_t>(index.size());
    const int64_t moved = static_cast<int64_t>(gather ? dst.size() : src.size()), pool = static_cast<int64_t>(gather ? src.size() : dst.size());
    if (width <= 0 || moved != rows * width || pool % width != 0) return size_error(gather ? "gather rows" : "scatter rows");
    for (int32_t i : index)
        if (i < 0 || i >= pool / width) return make_error(error_code::out_of_range, "move rows: index outside the rows");
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) {
            if (gather) dst[r * width + i] = src[int64_t{index[r]} * width + i];
            else dst[int64_t{index[r]} * width + i] = src[r * width + i];
        }
    return status::ok();
}
status emu_gather_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst) {
    return emu_move_rows(src, width, index, dst, true);
}
status emu_scatter_rows(std::span<const float> src, int64_t width, std::span<const int32_t> index, std::span<float> dst) {
    return emu_move_rows(src, width, index, dst, false);
}

status emu_scale_rows(std::span<float> x, int64_t width, std::span<const float> w) {
    if (width <= 0 || static_cast<int64_t>(x.size()) != static_cast<int64_t>(w.size()) * width) return size_error("scale rows");
    for (size_t r = 0; r < w.size(); ++r)
        for (int64_t i = 0; i < width; ++i) x[static_cast<int64_t>(r) * width + i] *= w[r];
    return status::ok();
}

status emu_add(std::span<const float> a, std::span<const float> b, std::span<float> out) {
    if (b.size() != a.size() || out.size() != a.size()) return size_error("add");
    for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
    return status::ok();
}

status emu_kv_path(std::span<float> x, int64_t dim, std::span<const float> norm_w, float eps, std::span<const float> inv_freq,
                   std::span<const int64_t> pos, bool official, int64_t nope, const k::row_codec& f, std::span<uint8_t> rows) {
    const int64_t T = static_cast<int64_t>(pos.size()), half = static_cast<int64_t>(inv_freq.size());
    if (dim <= 0 || f.dims != dim || static_cast<int64_t>(x.size()) != T * dim || static_cast<int64_t>(norm_w.size()) != dim ||
        static_cast<int64_t>(rows.size()) != T * f.bytes || 2 * half > dim || nope < 0 || nope > dim)
        return size_error("K8 kv path");
    for (int64_t t = 0; t < T; ++t)
        k::kv_path_row(&x[t * dim], dim, norm_w.data(), eps, inv_freq.data(), half, pos[t], official, nope, f, &rows[t * f.bytes]);
    return status::ok();
}

status emu_indexer_q_path(std::span<float> x, int64_t heads, int64_t dim, std::span<const float> inv_freq,
                          std::span<const int64_t> pos, bool official) {
    const int64_t T = static_cast<int64_t>(pos.size()), half = static_cast<int64_t>(inv_freq.size());
    if (dim <= 0 || static_cast<int64_t>(x.size()) != T * heads * dim || 2 * half > dim || (dim & (dim - 1)) != 0)
        return size_error("K10 indexer q path");
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < heads; ++h) k::indexer_q_head(&x[(t * heads + h) * dim], dim, inv_freq.data(), half, pos[t], official);
    return status::ok();
}

}  // namespace

const op_table& device_ops() {
    static const op_table t{"device",   op_embed_expand, op_linear,  op_rms_norm,  op_qdq_fp8, op_rope,
                            op_hc_pre,  op_hc_post,      op_attention, op_argmax, op_route,  op_swiglu,
                            op_moe_combine, op_encode_rows, op_decode_rows, op_indexer_scores, op_compressor_pool,
                            op_official_sim, op_top_k, op_hc_head, op_gather_rows, op_scatter_rows, op_scale_rows,
                            op_add, op_kv_path, op_indexer_q_path};
    return t;
}

const op_table& emulated_ops() {
    static const op_table t{"host emulation", emu_embed_expand, emu_linear,    emu_rms_norm, emu_qdq_fp8,
                            emu_rope,         emu_hc_pre,       emu_hc_post,   emu_attention, emu_argmax,
                            emu_route,        emu_swiglu,       emu_moe_combine, emu_encode_rows, emu_decode_rows,
                            emu_indexer_scores, emu_compressor_pool, emu_official_sim, emu_top_k, emu_hc_head,
                            emu_gather_rows, emu_scatter_rows, emu_scale_rows, emu_add, emu_kv_path,
                            emu_indexer_q_path};
    return t;
}

}  // namespace tandem::cuda
