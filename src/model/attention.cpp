// model/attention.cpp — the attention sublayer: q/kv projections, compressors, lightning indexer,
// sliding-window + compressed sparse attention with sink, inverse RoPE, grouped output.
//
// Why one code path for prefill, chunked prefill and decode: every token's result depends only
// on (its own projections, the rows already in its sequence_state, the earlier rows of the same
// chunk). The chunk's own kv rows stay in the batch buffer until the chunk is done; only then are
// they written to the window ring, so a chunk longer than the window still sees the right rows.
// Key order inside one softmax is fixed (window rows by position, then compressed rows by index),
// so any chunking gives bitwise the same logits.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/kernels.h"
#include "model/forward.h"

namespace tandem::model {

namespace {

struct compressor_shape {
    int64_t m = 0;        // compress rate
    int64_t dim = 0;      // D' (row width)
    bool overlap = false; // CSA: two series, 2m-slot windows
};

// Pools one closed window into out[dim] (softmax over slots, independently per feature).
void pool_window(const compressor_shape& s, const compressor_state& st, float* out) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D;
    const int64_t off = s.overlap ? D : 0;  // current window contributes Cb (second half) when overlapping
    for (int64_t e = 0; e < D; ++e) {
        float mx = -INFINITY;
        if (s.overlap && st.has_prev)
            for (int64_t j = 0; j < m; ++j) mx = std::max(mx, st.prev_score[j * D + e]);
        for (int64_t j = 0; j < m; ++j) mx = std::max(mx, st.pending_score[j * cd + off + e]);
        float sum = 0.0f;
        if (s.overlap && st.has_prev)
            for (int64_t j = 0; j < m; ++j) sum += std::exp(st.prev_score[j * D + e] - mx);
        for (int64_t j = 0; j < m; ++j) sum += std::exp(st.pending_score[j * cd + off + e] - mx);
        float acc = 0.0f;
        if (s.overlap && st.has_prev)
            for (int64_t j = 0; j < m; ++j)
                acc += st.prev_kv[j * D + e] * (std::exp(st.prev_score[j * D + e] - mx) / sum);
        for (int64_t j = 0; j < m; ++j)
            acc += st.pending_kv[j * cd + off + e] * (std::exp(st.pending_score[j * cd + off + e] - mx) / sum);
        out[e] = acc;
    }
}

// Feeds one sequence's new tokens through a compressor; appends emitted rows to `rows`.
void run_compressor(const model_config& c, const compressor_shape& s, const compressor_weights& cw,
                    const rope_table& rope, const float* kv, const float* gate, int64_t n_tokens, int64_t start_pos,
                    compressor_state& st, std::vector<float>& rows) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D, R = c.rope_head_dim;
    std::vector<float> pooled(static_cast<size_t>(D));
    for (int64_t i = 0; i < n_tokens; ++i) {
        const int64_t pos = start_pos + i, slot = pos % m;
        st.pending_kv.insert(st.pending_kv.end(), kv + i * cd, kv + (i + 1) * cd);
        for (int64_t e = 0; e < cd; ++e) st.pending_score.push_back(gate[i * cd + e] + cw.ape.ptr()[slot * cd + e]);
        if (slot != m - 1) continue;
        pool_window(s, st, pooled.data());
        size_t at = rows.size();
        rows.resize(at + static_cast<size_t>(D));
        cpu::rms_norm(pooled.data(), cw.norm.ptr(), D, c.rms_norm_eps, &rows[at]);
        rope.apply(&rows[at + static_cast<size_t>(D - R)], pos + 1 - m, false);
        if (s.overlap) {  // keep this window's Ca half for the next window
            st.prev_kv.resize(static_cast<size_t>(m * D));
            st.prev_score.resize(static_cast<size_t>(m * D));
            for (int64_t j = 0; j < m; ++j)
                for (int64_t e = 0; e < D; ++e) {
                    st.prev_kv[j * D + e] = st.pending_kv[j * cd + e];
                    st.prev_score[j * D + e] = st.pending_score[j * cd + e];
                }
            st.has_prev = true;
        }
        st.pending_kv.clear();
        st.pending_score.clear();
    }
}

// Indices of the k largest scores, returned in ascending index order. Which of several EXACTLY
// equal scores wins follows torch.topk on CPU (at::native::topk_impl_loop: (value, index) pairs
// ordered by value only, std::partial_sort when k·64 <= n, else std::nth_element), because
// ReLU makes exact zero scores common and HF transformers is the reference. Like HF, the
// candidates are all compressed rows present after this chunk's compressor update, the ones the
// query may not see yet at −inf. That reproduces HF in every mode (full prefill, chunked prefill,
// decode) — including HF's own dependence on the chunking when exactly equal scores straddle
// the top-k boundary; without such a tie, every chunking selects the same rows.
std::vector<int32_t> top_k_ascending(const std::vector<float>& v, int64_t k) {
    const int64_t n = static_cast<int64_t>(v.size());
    std::vector<int32_t> idx;
    if (k >= n) {
        idx.resize(static_cast<size_t>(n));
        std::iota(idx.begin(), idx.end(), 0);
        return idx;
    }
    std::vector<std::pair<float, int64_t>> q(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j)] = {v[static_cast<size_t>(j)], j};
    auto larger = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
        return a.first > b.first;
    };
    if (k * 64 <= n) std::partial_sort(q.begin(), q.begin() + k, q.end(), larger);
    else std::nth_element(q.begin(), q.begin() + k - 1, q.end(), larger);
    for (int64_t j = 0; j < k; ++j) idx.push_back(static_cast<int32_t>(q[static_cast<size_t>(j)].second));
    std::sort(idx.begin(), idx.end());
    return idx;
}

}  // namespace

void model_impl::attention(int64_t layer, const batch& b, const std::vector<float>& x, std::vector<float>& out) {
    const layer_config& lc = cfg.layers[static_cast<size_t>(layer)];
    const attention_weights& aw = w.layers[static_cast<size_t>(layer)].attn;
    const int64_t T = b.rows, d = cfg.hidden_size, H = cfg.num_attention_heads, D = cfg.head_dim;
    const int64_t R = cfg.rope_head_dim, N = D - R, W = cfg.sliding_window, ql = cfg.q_lora_rank;
    const rope_table& rope = lc.attention == attention_type::sliding ? rope_main : rope_compress;
    const float eps = static_cast<float>(cfg.rms_norm_eps);

    // Projections (row-wise).
    std::vector<float> qr, q, kv;
    linear(x, T, aw.wq_a, qr);
    linear(x, T, aw.wkv, kv);
    pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            cpu::rms_norm(&qr[r * ql], aw.q_norm.ptr(), ql, eps, &qr[r * ql]);
            cpu::rms_norm(&kv[r * D], aw.kv_norm.ptr(), D, eps, &kv[r * D]);
            rope.apply(&kv[r * D + N], b.pos[r], false);
        }
    });
    linear(qr, T, aw.wq_b, q);
    pool->parallel_for(T * H, 4, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float* qh = &q[i * D];
            cpu::rms_norm(qh, nullptr, D, eps, qh);
            rope.apply(qh + N, b.pos[i / H], false);
        }
    });

    // Compressors extend each sequence's compressed rows (all rows this chunk closes).
    const int64_t m = lc.compress_ratio;
    const int64_t Di = cfg.index_head_dim, Hi = cfg.index_n_heads;
    std::vector<float> qi, iw;
    if (aw.has_compressor) {
        compressor_shape cs{m, D, lc.attention == attention_type::csa};
        std::vector<float> ckv, cg;
        linear(x, T, aw.compressor.wkv, ckv);
        linear(x, T, aw.compressor.wgate, cg);
        const int64_t cd = (cs.overlap ? 2 : 1) * D;
        for (const batch_seq& s : b.seqs) {
            layer_state& ls = s.state->layers[static_cast<size_t>(layer)];
            run_compressor(cfg, cs, aw.compressor, rope_compress, &ckv[s.row0 * cd], &cg[s.row0 * cd], s.rows,
                           s.start_pos, ls.comp, ls.comp_rows);
        }
    }
    if (aw.has_indexer) {
        compressor_shape is{m, Di, true};
        std::vector<float> ikv, ig;
        linear(x, T, aw.idx_compressor.wkv, ikv);
        linear(x, T, aw.idx_compressor.wgate, ig);
        for (const batch_seq& s : b.seqs) {
            layer_state& ls = s.state->layers[static_cast<size_t>(layer)];
            run_compressor(cfg, is, aw.idx_compressor, rope_compress, &ikv[s.row0 * 2 * Di], &ig[s.row0 * 2 * Di],
                           s.rows, s.start_pos, ls.idx, ls.idx_rows);
        }
        linear(qr, T, aw.idx_wq_b, qi);
        linear(x, T, aw.idx_weights_proj, iw);
        for (int64_t i = 0; i < T * Hi; ++i) rope_compress.apply(&qi[i * Di + Di - R], b.pos[i / Hi], false);
    }

    // Per row: which compressed rows it attends to.
    std::vector<std::vector<int32_t>> selected(static_cast<size_t>(T));
    std::vector<const batch_seq*> seq_of(static_cast<size_t>(T));
    for (const batch_seq& s : b.seqs)
        for (int64_t r = s.row0; r < s.row0 + s.rows; ++r) seq_of[static_cast<size_t>(r)] = &s;
    if (aw.has_compressor) {
        const float idx_scale = 1.0f / std::sqrt(static_cast<float>(Di));
        const float head_scale = 1.0f / std::sqrt(static_cast<float>(Hi));
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t visible = (b.pos[r] + 1) / m;
                auto& sel = selected[static_cast<size_t>(r)];
                if (!aw.has_indexer || visible <= cfg.index_topk) {
                    sel.resize(static_cast<size_t>(visible));
                    std::iota(sel.begin(), sel.end(), 0);
                    continue;
                }
                const layer_state& ls = seq_of[static_cast<size_t>(r)]->state->layers[static_cast<size_t>(layer)];
                const int64_t total = int64_t(ls.idx_rows.size()) / Di;
                std::vector<float> score(static_cast<size_t>(total), -INFINITY);
                for (int64_t wv = 0; wv < visible; ++wv) {
                    float sc = 0.0f;
                    for (int64_t h = 0; h < Hi; ++h) {
                        float dp = cpu::dot(&qi[(r * Hi + h) * Di], &ls.idx_rows[wv * Di], Di);
                        sc += (std::max(dp, 0.0f) * idx_scale) * (iw[r * Hi + h] * head_scale);
                    }
                    score[static_cast<size_t>(wv)] = sc;
                }
                sel = top_k_ascending(score, cfg.index_topk);
            }
        });
    }

    // Attention with sink: per (row, head).
    std::vector<float> o(static_cast<size_t>(T * H * D), 0.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    pool->parallel_for(T * H, 1, [&](int64_t i0, int64_t i1) {
        std::vector<const float*> keys;
        std::vector<float> logit;
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t r = i / H, h = i % H, t = b.pos[r];
            const batch_seq& s = *seq_of[static_cast<size_t>(r)];
            const layer_state& ls = s.state->layers[static_cast<size_t>(layer)];
            keys.clear();
            for (int64_t p = std::max<int64_t>(0, t - W + 1); p <= t; ++p)
                keys.push_back(p >= s.start_pos ? &kv[(s.row0 + p - s.start_pos) * D] : &ls.window[(p % W) * D]);
            for (int32_t wv : selected[static_cast<size_t>(r)]) keys.push_back(&ls.comp_rows[wv * D]);
            const float* qh = &q[i * D];
            const float sink = aw.sink.ptr()[h];
            logit.resize(keys.size());
            float mx = sink;
            for (size_t j = 0; j < keys.size(); ++j) mx = std::max(mx, logit[j] = cpu::dot(qh, keys[j], D) * scale);
            float denom = 0.0f;
            for (size_t j = 0; j < keys.size(); ++j) denom += (logit[j] = std::exp(logit[j] - mx));
            denom += std::exp(sink - mx);
            float* oh = &o[i * D];
            for (size_t j = 0; j < keys.size(); ++j) {
                const float p = logit[j] / denom;
                for (int64_t e = 0; e < D; ++e) oh[e] += p * keys[j][e];
            }
            rope.apply(oh + N, t, true);  // K = V carried RoPE at the key position: undo at the query's
        }
    });

    // The chunk's kv rows enter the window ring only now (see the file comment).
    for (const batch_seq& s : b.seqs) {
        layer_state& ls = s.state->layers[static_cast<size_t>(layer)];
        for (int64_t p = std::max(s.start_pos, s.start_pos + s.rows - W); p < s.start_pos + s.rows; ++p)
            std::copy_n(&kv[(s.row0 + p - s.start_pos) * D], D, &ls.window[(p % W) * D]);
    }

    // Grouped low-rank output projection.
    const int64_t g = cfg.o_groups, ro = cfg.o_lora_rank, gw = H * D / g;
    std::vector<float> z(static_cast<size_t>(T * g * ro));
    for (int64_t gi = 0; gi < g; ++gi)
        cpu::linear(*pool, o.data() + gi * gw, T, H * D, aw.wo_a.ptr() + gi * ro * gw, gw, ro, z.data() + gi * ro, g * ro);
    linear(z, T, aw.wo_b, out);
    (void)d;
}

}  // namespace tandem::model
