// model/attention.cpp — the attention sublayer: q/kv projections, compressors, lightning indexer,
// sliding-window + compressed sparse attention with sink, inverse RoPE, grouped output.
//
// Why one code path for prefill, chunked prefill and decode: every token's result depends only
// on (its own projections, the rows already in its sequence's pool state, the earlier rows of the
// same chunk). The chunk's own kv rows stay in the batch buffer until the chunk is done; only then
// are they written to the window ring, so a chunk longer than the window still sees the right
// rows. Every row is rounded through its storage codec before anything reads it (in-chunk rows
// too), and key order inside one softmax is fixed (window rows by position, then compressed rows
// by index), so any chunking gives bitwise the same logits.
//
// Compressor rings (pool state, fp32 rows of [kv | score] with score = gate + ape):
//   HCA (m slots):   slot pos % m holds the current window's tokens.
//   CSA (2m slots):  slots m + pos % m hold the current window; slots 0..m−1 the previous
//                    closed window, whose Ca half (first D') pools into the next row. Initial
//                    score −inf gives those slots weight 0 before the first window closes.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cache/codec.h"
#include "core/check.h"
#include "cpu/kernels.h"
#include "model/forward.h"
#include "model/numerics.h"

namespace tandem::model {

namespace {

struct compressor_shape {
    int64_t m = 0;        // compress rate
    int64_t dim = 0;      // D' (row width)
    bool overlap = false; // CSA: two series, 2m-slot windows
    bool indexer = false; // the indexer's compressor (FP4 simulation instead of FP8)
};

// Pools one closed window into out[dim] (softmax over slots, independently per feature).
void pool_window(const compressor_shape& s, const float* ring, float* out) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D, F = 2 * cd;
    // (row, feature offset) of every slot: previous Ca then current Cb (CSA), or the m tokens (HCA).
    std::vector<std::pair<int64_t, int64_t>> slots;
    if (s.overlap) {
        for (int64_t j = 0; j < m; ++j) slots.emplace_back(j, 0);
        for (int64_t j = 0; j < m; ++j) slots.emplace_back(m + j, D);
    } else {
        for (int64_t j = 0; j < m; ++j) slots.emplace_back(j, 0);
    }
    for (int64_t e = 0; e < D; ++e) {
        float mx = -INFINITY;
        for (auto [row, off] : slots) mx = std::max(mx, ring[row * F + cd + off + e]);
        float sum = 0.0f;
        for (auto [row, off] : slots) sum += std::exp(ring[row * F + cd + off + e] - mx);
        float acc = 0.0f;
        for (auto [row, off] : slots)
            acc += ring[row * F + off + e] * (std::exp(ring[row * F + cd + off + e] - mx) / sum);
        out[e] = acc;
    }
}

// Feeds one sequence's new tokens through a compressor ring; emitted rows (normed, RoPE'd at the
// window's first position) go to `emit(w, row)`.
template <typename Emit>
void run_compressor(const model_config& c, const compressor_shape& s, const compressor_weights& cw,
                    const rope_table& rope, const float* kv, const float* gate, int64_t n_tokens, int64_t start_pos,
                    float* ring, bool official, Emit&& emit) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D, F = 2 * cd, R = c.rope_head_dim;
    std::vector<float> pooled(static_cast<size_t>(D)), row(static_cast<size_t>(D));
    for (int64_t i = 0; i < n_tokens; ++i) {
        const int64_t pos = start_pos + i, slot = pos % m;
        float* dst = ring + ((s.overlap ? m : 0) + slot) * F;
        std::copy_n(kv + i * cd, cd, dst);
        for (int64_t e = 0; e < cd; ++e) dst[cd + e] = gate[i * cd + e] + cw.ape.ptr()[slot * cd + e];
        if (slot != m - 1) continue;
        pool_window(s, ring, pooled.data());
        cpu::rms_norm(pooled.data(), cw.norm.ptr(), D, c.rms_norm_eps, row.data());
        rope.apply(&row[static_cast<size_t>(D - R)], pos + 1 - m, false);
        if (official && s.indexer) indexer_fp4_sim(row.data(), D);
        else if (official) kv_fp8_sim(row.data(), D - R, D);
        emit(pos / m, row.data());
        if (s.overlap) std::copy_n(ring + m * F, m * F, ring);  // this window becomes "previous"
    }
}

// Encodes a row into its storage format and decodes it back: what every reader will see.
void round_trip(const cache::row_format& fmt, float* values, std::vector<std::byte>& scratch) {
    scratch.resize(static_cast<size_t>(fmt.bytes));
    cache::codec::encode_row(fmt, std::span<const float>(values, static_cast<size_t>(fmt.dims)), scratch.data());
    cache::codec::decode_row(fmt, scratch.data(), std::span<float>(values, static_cast<size_t>(fmt.dims)));
}

// One sequence's rows of one layer, decoded for reading.
struct seq_view {
    std::vector<float> window;  // [W, D] by pos % W (positions before the chunk)
    std::vector<float> comp;    // [n, D]
    std::vector<float> idx;     // [n, Di]
    int64_t n_rows = 0;
};

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
    const int64_t T = b.rows, H = cfg.num_attention_heads, D = cfg.head_dim;
    const int64_t R = cfg.rope_head_dim, N = D - R, W = cfg.sliding_window, ql = cfg.q_lora_rank;
    const rope_table& rope = lc.attention == attention_type::sliding ? rope_main : rope_compress;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    cache::page_pool& pool_ = *b.pool;
    const cache::row_format& kv_fmt = pool_.layout().kv_row();
    const cache::row_format& ik_fmt = pool_.layout().index_k_row();
    const int32_t lid = static_cast<int32_t>(layer);
    const bool official = opt.numerics == numerics_mode::official;

    // Projections (row-wise). kv rows are rounded to their storage format right away.
    std::vector<float> qr, q, kv;
    linear(x, T, aw.wq_a, qr);
    linear(x, T, aw.wkv, kv);
    pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
        std::vector<std::byte> scratch;
        for (int64_t r = r0; r < r1; ++r) {
            cpu::rms_norm(&qr[r * ql], aw.q_norm.ptr(), ql, eps, &qr[r * ql]);
            cpu::rms_norm(&kv[r * D], aw.kv_norm.ptr(), D, eps, &kv[r * D]);
            rope.apply(&kv[r * D + N], b.pos[r], false);
            if (official) kv_fp8_sim(&kv[r * D], N, D);
            round_trip(kv_fmt, &kv[r * D], scratch);
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

    // Compressors append the rows this chunk closes to the sequence's pool buffers.
    const int64_t m = lc.compress_ratio;
    const int64_t Di = cfg.index_head_dim, Hi = cfg.index_n_heads;
    auto compress = [&](const compressor_weights& cw, compressor_shape cs, cache::state_kind sk,
                        cache::buffer_kind bk, const cache::row_format& fmt) {
        const int64_t cd = (cs.overlap ? 2 : 1) * cs.dim;
        std::vector<float> ckv, cg;
        linear(x, T, cw.wkv, ckv);
        linear(x, T, cw.wgate, cg);
        for (const batch_seq& s : b.seqs) {
            float* ring = pool_.compressor_state_for_write(s.slot, lid, sk);
            TANDEM_CHECK_MSG(ring != nullptr, "forward on a stale sequence slot");
            run_compressor(cfg, cs, cw, rope_compress, &ckv[s.row0 * cd], &cg[s.row0 * cd], s.rows, s.start_pos, ring,
                           official, [&](int64_t wv, const float* row) {
                               std::byte* dst = pool_.row_for_write(s.slot, lid, bk, wv);
                               TANDEM_CHECK_MSG(dst != nullptr, "compressed row write rejected (sealed or stale page)");
                               cache::codec::encode_row(fmt, std::span<const float>(row, size_t(fmt.dims)), dst);
                           });
        }
    };
    std::vector<float> qi, iw;
    if (aw.has_compressor)
        compress(aw.compressor, {m, D, lc.attention == attention_type::csa}, cache::state_kind::attn_compressor,
                 cache::buffer_kind::compressed_kv, kv_fmt);
    if (aw.has_indexer) {
        compress(aw.idx_compressor, {m, Di, true, true}, cache::state_kind::index_compressor, cache::buffer_kind::index_k,
                 ik_fmt);
        linear(qr, T, aw.idx_wq_b, qi);
        linear(x, T, aw.idx_weights_proj, iw);
        for (int64_t i = 0; i < T * Hi; ++i) {
            rope_compress.apply(&qi[i * Di + Di - R], b.pos[i / Hi], false);
            if (official) indexer_fp4_sim(&qi[i * Di], Di);
        }
    }

    // Decode each sequence's readable rows once: the window ring (positions before the chunk) and
    // every compressed / index row emitted so far.
    std::vector<seq_view> views(b.seqs.size());
    std::vector<int32_t> seq_of(static_cast<size_t>(T));
    for (size_t si = 0; si < b.seqs.size(); ++si) {
        const batch_seq& s = b.seqs[si];
        seq_view& v = views[si];
        for (int64_t r = s.row0; r < s.row0 + s.rows; ++r) seq_of[static_cast<size_t>(r)] = static_cast<int32_t>(si);
        v.window.assign(static_cast<size_t>(W * D), 0.0f);
        for (int64_t p = std::max<int64_t>(0, s.start_pos - W); p < s.start_pos; ++p)
            cache::codec::decode_row(kv_fmt, pool_.window_row(s.slot, lid, p),
                                     std::span<float>(&v.window[(p % W) * D], size_t(D)));
        if (!aw.has_compressor) continue;
        v.n_rows = (s.start_pos + s.rows) / m;
        v.comp.resize(static_cast<size_t>(v.n_rows * D));
        for (int64_t wv = 0; wv < v.n_rows; ++wv)
            cache::codec::decode_row(kv_fmt, pool_.row(s.slot, lid, cache::buffer_kind::compressed_kv, wv),
                                     std::span<float>(&v.comp[wv * D], size_t(D)));
        if (!aw.has_indexer) continue;
        v.idx.resize(static_cast<size_t>(v.n_rows * Di));
        for (int64_t wv = 0; wv < v.n_rows; ++wv)
            cache::codec::decode_row(ik_fmt, pool_.row(s.slot, lid, cache::buffer_kind::index_k, wv),
                                     std::span<float>(&v.idx[wv * Di], size_t(Di)));
    }

    // Per row: which compressed rows it attends to.
    std::vector<std::vector<int32_t>> selected(static_cast<size_t>(T));
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
                const seq_view& v = views[static_cast<size_t>(seq_of[static_cast<size_t>(r)])];
                std::vector<float> score(static_cast<size_t>(v.n_rows), -INFINITY);
                for (int64_t wv = 0; wv < visible; ++wv) {
                    float sc = 0.0f;
                    for (int64_t h = 0; h < Hi; ++h) {
                        float dp = cpu::dot(&qi[(r * Hi + h) * Di], &v.idx[wv * Di], Di);
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
            const size_t si = static_cast<size_t>(seq_of[static_cast<size_t>(r)]);
            const batch_seq& s = b.seqs[si];
            const seq_view& v = views[si];
            keys.clear();
            for (int64_t p = std::max<int64_t>(0, t - W + 1); p <= t; ++p)
                keys.push_back(p >= s.start_pos ? &kv[(s.row0 + p - s.start_pos) * D] : &v.window[(p % W) * D]);
            for (int32_t wv : selected[static_cast<size_t>(r)]) keys.push_back(&v.comp[wv * D]);
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
    for (const batch_seq& s : b.seqs)
        for (int64_t p = std::max(s.start_pos, s.start_pos + s.rows - W); p < s.start_pos + s.rows; ++p) {
            std::byte* dst = pool_.window_row_for_write(s.slot, lid, p);
            TANDEM_CHECK_MSG(dst != nullptr, "window write on a stale sequence slot");
            cache::codec::encode_row(kv_fmt, std::span<const float>(&kv[(s.row0 + p - s.start_pos) * D], size_t(D)),
                                     dst);
        }

    // Grouped low-rank output projection.
    const int64_t g = cfg.o_groups, ro = cfg.o_lora_rank, gw = H * D / g;
    std::vector<float> z(static_cast<size_t>(T * g * ro));
    for (int64_t gi = 0; gi < g; ++gi)
        cpu::linear(*pool, o.data() + gi * gw, T, H * D, aw.wo_a.ptr() + gi * ro * gw, gw, ro, z.data() + gi * ro, g * ro);
    linear(z, T, aw.wo_b, out);
}

}  // namespace tandem::model
