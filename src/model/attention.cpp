// model/attention.cpp — the attention sublayer: q/kv projections, compressors, lightning indexer,
// sliding-window + compressed sparse attention with sink, inverse RoPE, grouped output.
//
// Why one code path for prefill, chunked prefill and decode: every token's result depends only
// on (its own projections, the rows already in its sequence's pool state, the earlier rows of the
// same chunk). The chunk's own kv rows stay in the batch buffer until the chunk is done; only then
// are they written to the window ring, so a chunk longer than the window still sees the right
// rows. Every row is rounded through its storage codec before anything reads it (in-chunk rows
// too), and key order inside one softmax is fixed (window rows by position, then compressed rows
// by index), so any chunking gives bitwise the same logits. The compressors: model/compressor.h;
// the indexer's selection: model/indexer.h.
#include <algorithm>
#include <cmath>
#include <span>

#include "cache/codec.h"
#include "core/check.h"
#include "core/exp_f32.h"
#include "cpu/attention_amx.h"
#include "cpu/kernels.h"
#include "model/compressor.h"
#include "model/forward.h"
#include "model/indexer.h"
#include "model/numerics.h"

namespace tandem::model {

namespace {

// Encodes a row into its storage format and decodes it back: what every reader will see.
void round_trip(const cache::row_format& fmt, float* values, std::vector<std::byte>& scratch) {
    scratch.resize(static_cast<size_t>(fmt.bytes));
    cache::codec::encode_row(fmt, std::span<const float>(values, static_cast<size_t>(fmt.dims)), scratch.data());
    cache::codec::decode_row(fmt, scratch.data(), std::span<float>(values, static_cast<size_t>(fmt.dims)));
}

// One sequence's rows of one layer, decoded for reading: ranges of the pass's flat buffers
// (attention_scratch), set per layer. Why not vectors of its own: a view per batch position kept
// the largest context any sequence at that position had brought, so over a long run every
// position could come to hold a long context's rows; flat buffers hold one step's worth.
struct seq_view {
    float* window = nullptr;         // [W, D] by pos % W (positions before the chunk)
    int32_t* comp_slot = nullptr;    // [n]: compressed row → its row in `comp`, −1 if unselected
    float* comp = nullptr;           // [rows some query selected, D], in ascending row order
    int64_t n_rows = 0;
};

// v[j] = v[j] · scale for j < n; returns the largest of `init` and every v[j] as the loop
// `m = std::max(m, v[j])` from m = init would (a NaN never wins a comparison, so it never enters).
// Eight maxima side by side, not one: the single chain waited a maxss latency per key and was 75% of
// attend()'s own samples in a 512-token prefill of `small`. The value cannot differ from the
// sequential one; only the sign of a zero maximum can, and the softmax uses the maximum only in
// x − max, where ±0 give the same bits except for x = ±0, whose exp is 1 either way.
float scale_and_max(float* v, int64_t n, float scale, float init) {
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] * scale;
    float m[8];
    for (float& mj : m) mj = init;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) m[l] = std::max(m[l], v[j + l]);
    for (; j < n; ++j) m[0] = std::max(m[0], v[j]);
    float mx = init;
    for (const float mj : m) mx = std::max(mx, mj);
    return mx;
}

}  // namespace

void decode_history_rows(const cache::layer_view& view, cache::slot_ref slot, cache::buffer_kind kind,
                         const cache::row_format& fmt, int64_t first, int64_t n, float* out) {
    for (int64_t i = first; i < first + n;) {
        const int64_t k = std::min(first + n - i, view.rows_left_in_page(kind, i));
        cache::codec::decode_rows(fmt, view.row(slot, kind, i), k, out + (i - first) * fmt.dims);
        i += k;
    }
}

// The attention pass's buffers (see model_impl::attn_scratch). One set serves every layer: a
// layer's pass is done with them before the next starts.
struct attention_scratch {
    std::vector<float> qr, q, kv, qi, iw, o, z, ckv, cg, ickv, icg;  // ickv/icg: the indexer's compressor
    std::vector<seq_view> views;
    std::vector<float> window, comp;  // every view's rows, sequences back to back
    std::vector<int32_t> comp_slot;
    std::vector<int32_t> seq_of;
    std::vector<std::vector<int32_t>> selected;  // resized, never shrunk: inner capacity is kept
};

int64_t held_bytes(const attention_scratch& sc) {
    int64_t bytes = held_bytes_of(sc.qr, sc.q, sc.kv, sc.qi, sc.iw, sc.o, sc.z, sc.ckv, sc.cg, sc.ickv, sc.icg, sc.views,
                                  sc.window, sc.comp, sc.comp_slot, sc.seq_of, sc.selected);
    for (const std::vector<int32_t>& sel : sc.selected) bytes += held_bytes(sel);
    return bytes;
}

namespace {

// One attention sublayer call, as named phases over shared buffers.
class attention_pass {
public:
    attention_pass(model_impl& m, attention_scratch& sc, const cache::layer_view& view, const batch& b,
                   const std::vector<float>& x)
        : qr_(sc.qr), q_(sc.q), kv_(sc.kv), qi_(sc.qi), iw_(sc.iw), o_(sc.o), z_(sc.z), ckv_(sc.ckv), cg_(sc.cg),
          ickv_(sc.ickv), icg_(sc.icg),
          sc_(sc), views_(sc.views), seq_of_(sc.seq_of), selected_(sc.selected), m_(m), c_(m.cfg),
          lc_(m.cfg.layers[static_cast<size_t>(view.layer())]),
          aw_(m.w.layers[static_cast<size_t>(view.layer())].attn), b_(b), x_(x), cp_(view),
          kv_fmt_(cp_.layout().kv_row()), ik_fmt_(cp_.layout().index_k_row()), lid_(view.layer()),
          T_(b.rows), H_(c_.num_attention_heads), D_(c_.head_dim), R_(c_.rope_head_dim), N_(D_ - R_),
          W_(c_.sliding_window), m_rate_(lc_.compress_ratio), Di_(c_.index_head_dim), Hi_(c_.index_n_heads),
          official_(m.opt.numerics == numerics_mode::official),
          tiles_(m.opt.amx_matmul && (kv_fmt_.encoding == cache::row_encoding::kv_bf16 ||
                                      kv_fmt_.encoding == cache::row_encoding::kv_fp8) &&
                 cpu::amx_attention_fits(D_)),
          rows_in_place_(tiles_ && kv_fmt_.encoding == cache::row_encoding::kv_bf16),
          rope_(lc_.attention == attention_type::sliding ? m.rope_main : m.rope_compress) {}

    void run(std::vector<float>& out) {
        project();
        if (aw_.has_compressor) compress_all();
        read_state();
        if (aw_.has_compressor) {
            select_rows();
            decode_selected();
        }
        attend();
        write_window();
        output(out);
    }

private:
    // q (per-head unweighted RMSNorm + RoPE), qr (shared with the indexer), kv (RMSNorm + RoPE,
    // official FP8 simulation, then rounded to its storage format). Every linear of x runs in one
    // pass (the compressors' and the indexer's included), then every linear of qr.
    void project() {
        const int64_t ql = c_.q_lora_rank;
        const float eps = static_cast<float>(c_.rms_norm_eps);
        linear_set of_x(m_);
        of_x.add(x_, T_, aw_.wq_a, qr_);
        of_x.add(x_, T_, aw_.wkv, kv_);
        if (aw_.has_compressor) {
            of_x.add(x_, T_, aw_.compressor.wkv, ckv_);
            of_x.add(x_, T_, aw_.compressor.wgate, cg_);
        }
        if (aw_.has_indexer) {
            of_x.add(x_, T_, aw_.idx_compressor.wkv, ickv_);
            of_x.add(x_, T_, aw_.idx_compressor.wgate, icg_);
            of_x.add(x_, T_, aw_.idx_weights_proj, iw_);
        }
        of_x.run();
        m_.pool->parallel_for(T_, 1, [&](int64_t r0, int64_t r1) {
            thread_local std::vector<std::byte> scratch;
            for (int64_t r = r0; r < r1; ++r) {
                cpu::rms_norm(&qr_[r * ql], aw_.q_norm.ptr(), ql, eps, &qr_[r * ql]);
                cpu::rms_norm(&kv_[r * D_], aw_.kv_norm.ptr(), D_, eps, &kv_[r * D_]);
                rope_.apply(&kv_[r * D_ + N_], b_.pos[r], false);
                if (official_) kv_fp8_sim(&kv_[r * D_], N_, D_);
                round_trip(kv_fmt_, &kv_[r * D_], scratch);
            }
        });
        linear_set of_qr(m_);
        of_qr.add(qr_, T_, aw_.wq_b, q_);
        if (aw_.has_indexer) of_qr.add(qr_, T_, aw_.idx_wq_b, qi_);
        of_qr.run();
        m_.pool->parallel_for(T_ * H_, 16, [&](int64_t i0, int64_t i1) {  // a decode row: inline
            thread_local std::vector<float> cs, sn;  // a row's cos / sin, shared by its heads
            cs.resize(rope_.inv_freq.size());
            sn.resize(rope_.inv_freq.size());
            int64_t angles_of = -1;
            for (int64_t i = i0; i < i1; ++i) {
                float* qh = &q_[i * D_];
                cpu::rms_norm(qh, nullptr, D_, eps, qh);
                if (i / H_ != angles_of) rope_.angles(b_.pos[i / H_], false, cs.data(), sn.data()), angles_of = i / H_;
                rope_.rotate(qh + N_, cs.data(), sn.data());
            }
        });
    }

    // Feeds one sequence's rows through one compressor (its projections ckv, cg were made in
    // project()); the rows they close go to the sequence's pool buffer.
    void compress(const batch_seq& s, const compressor_weights& cw, compressor_shape cs, cache::state_kind sk,
                  cache::buffer_kind bk, const cache::row_format& fmt, const std::vector<float>& ckv,
                  const std::vector<float>& cg) {
        const int64_t cd = (cs.overlap ? 2 : 1) * cs.dim;
        float* ring = cp_.compressor_state_for_write(s.slot, sk);
        TANDEM_CHECK_MSG(ring != nullptr, "forward on a stale sequence slot");
        run_compressor(c_, cs, cw, m_.rope_compress, &ckv[s.row0 * cd], &cg[s.row0 * cd], s.rows, s.start_pos, ring,
                       official_, [&](int64_t wv, const float* row) {
                           std::byte* dst = cp_.row_for_write(s.slot, bk, wv);
                           TANDEM_CHECK_MSG(dst != nullptr, "compressed row write rejected (sealed or stale page)");
                           cache::codec::encode_row(fmt, std::span<const float>(row, size_t(fmt.dims)), dst);
                       });
    }

    // Sequences in parallel: each owns its rings and rows. Serial, a batch-16 decode step of `small`
    // spent ~2% of its time pooling the windows its sequences closed while the other thread waited.
    // The indexer's queries are RoPE'd in the same pass, per row one set of angles for its heads.
    void compress_all() {
        m_.pool->parallel_for(static_cast<int64_t>(b_.seqs.size()), 1, [&](int64_t s0, int64_t s1) {
            thread_local std::vector<float> cs, sn;
            cs.resize(m_.rope_compress.inv_freq.size());
            sn.resize(m_.rope_compress.inv_freq.size());
            for (int64_t si = s0; si < s1; ++si) {
                const batch_seq& s = b_.seqs[static_cast<size_t>(si)];
                compress(s, aw_.compressor, {m_rate_, D_, lc_.attention == attention_type::csa, false},
                         cache::state_kind::attn_compressor, cache::buffer_kind::compressed_kv, kv_fmt_, ckv_, cg_);
                if (!aw_.has_indexer) continue;
                compress(s, aw_.idx_compressor, {m_rate_, Di_, true, true}, cache::state_kind::index_compressor,
                         cache::buffer_kind::index_k, ik_fmt_, ickv_, icg_);
                for (int64_t r = s.row0; r < s.row0 + s.rows; ++r) {
                    m_.rope_compress.angles(b_.pos[r], false, cs.data(), sn.data());
                    for (int64_t h = 0; h < Hi_; ++h) {
                        float* qh = &qi_[(r * Hi_ + h) * Di_];
                        m_.rope_compress.rotate(qh + Di_ - R_, cs.data(), sn.data());
                        if (official_) indexer_fp4_sim(qh, Di_);
                    }
                }
            }
        });
    }

    // Decodes each sequence's window ring once (positions before the chunk). The index rows are
    // decoded a chunk at a time where they are scored (select_rows), compressed KV rows in
    // decode_selected: a long context has far more of them than top-k reads. Sequences run in
    // parallel, and rows are decoded in runs as they lie in memory (codec::decode_rows over the
    // ring or a page), not one pool lookup and scalar decode per row: that was ~1.2 µs per bf16
    // row, 0.6 ms of a ~10 ms `small` batch-1 token, serially.
    void read_state() {
        const size_t S = b_.seqs.size();
        views_.resize(S);
        fit(seq_of_, T_);
        for (size_t si = 0; si < S; ++si)
            for (int64_t r = b_.seqs[si].row0; r < b_.seqs[si].row0 + b_.seqs[si].rows; ++r)
                seq_of_[static_cast<size_t>(r)] = static_cast<int32_t>(si);
        fit(sc_.window, static_cast<int64_t>(S) * W_ * D_);
        for (size_t si = 0; si < S; ++si) {
            const batch_seq& s = b_.seqs[si];
            views_[si].n_rows = aw_.has_compressor ? (s.start_pos + s.rows) / m_rate_ : 0;
            views_[si].window = &sc_.window[si * static_cast<size_t>(W_ * D_)];
        }
        if (rows_in_place_) return;  // nothing to decode: no pass
        m_.pool->parallel_for(static_cast<int64_t>(S), 1, [&](int64_t s0, int64_t s1) {
            for (int64_t si = s0; si < s1; ++si) read_seq_state(b_.seqs[static_cast<size_t>(si)], views_[static_cast<size_t>(si)]);
        });
    }

    // Only ring slots of positions [start_pos − W, start_pos) are ever read (attend() takes later
    // positions from the chunk), and each is decoded here: no zero fill. Those positions are at
    // most two runs of the ring (it wraps once at most).
    void read_seq_state(const batch_seq& s, seq_view& v) const {
        const std::byte* ring = cp_.window_ring(s.slot);
        for (int64_t p = std::max<int64_t>(0, s.start_pos - W_); p < s.start_pos;) {
            const int64_t row = p % W_, n = std::min(s.start_pos - p, W_ - row);
            cache::codec::decode_rows(kv_fmt_, ring + row * kv_fmt_.bytes, n, &v.window[row * D_]);
            p += n;
        }
    }

    // Which compressed rows each query attends to (model/indexer.h).
    void select_rows() {
        select_compressed_rows(index_inputs{*m_.pool, b_, seq_of_, cp_, ik_fmt_, qi_.data(), iw_.data(), Hi_, Di_,
                                            c_.index_topk, m_rate_, aw_.has_indexer},
                               selected_);
    }

    // Decodes, once per sequence, the compressed rows that at least one of its queries selected.
    // Selected rows keep their ascending order in `comp`, so each run of consecutive row indices
    // is one decode_history_rows.
    void decode_selected() {
        // Each sequence's range of comp holds the most rows its queries can select (the indexer's
        // top-k per query, at most every row; HCA and short CSA contexts: every row), so the ranges
        // are known before the selection is counted and one pass numbers and decodes.
        const size_t S = b_.seqs.size();
        const auto selectable = [&](size_t si) {
            const int64_t n = views_[si].n_rows;
            return aw_.has_indexer ? std::min(n, b_.seqs[si].rows * c_.index_topk) : n;
        };
        int64_t slots = 0, most = 0;
        for (size_t si = 0; si < S; ++si) slots += views_[si].n_rows, most += selectable(si);
        fit_at_least(sc_.comp_slot, slots);
        fit_at_least(sc_.comp, most * D_);
        for (size_t si = 0, at = 0, row = 0; si < S; ++si) {
            views_[si].comp_slot = &sc_.comp_slot[at];
            views_[si].comp = &sc_.comp[row * static_cast<size_t>(D_)];
            at += static_cast<size_t>(views_[si].n_rows);
            row += static_cast<size_t>(selectable(si));
        }
        if (rows_in_place_) return;  // attend reads the selected rows in the cache: no pass
        // Fewer sequences than threads (a lone decode): each sequence's rows split over the
        // threads, as the indexer's chunks are — an HCA layer decodes every compressed row, 1/128
        // of the context, each step. Decoding is row by row, so the split changes no bit.
        if (static_cast<int64_t>(S) < m_.pool->size()) {
            for (size_t si = 0; si < S; ++si) {
                number_selected(b_.seqs[si], views_[si]);
                m_.pool->parallel_for(views_[si].n_rows, k_decode_grain, [&](int64_t w0, int64_t w1) {
                    decode_numbered(b_.seqs[si], views_[si], w0, w1);
                });
            }
            return;
        }
        m_.pool->parallel_for(static_cast<int64_t>(S), 1, [&](int64_t s0, int64_t s1) {
            for (int64_t si = s0; si < s1; ++si) {
                const batch_seq& s = b_.seqs[static_cast<size_t>(si)];
                seq_view& v = views_[static_cast<size_t>(si)];
                number_selected(s, v);
                decode_numbered(s, v, 0, v.n_rows);
            }
        });
    }

    // Rows a split decode_selected gives a thread at least (~8 µs of decoding at V4's 512 dims).
    static constexpr int64_t k_decode_grain = 16;

    // comp_slot: each compressed row some query of the sequence selected gets the next row of
    // comp, ascending.
    void number_selected(const batch_seq& s, seq_view& v) const {
        std::fill_n(v.comp_slot, v.n_rows, -1);
        for (int64_t r = s.row0; r < s.row0 + s.rows; ++r)
            for (int32_t wv : selected_[static_cast<size_t>(r)]) v.comp_slot[wv] = 0;
        int32_t used = 0;
        for (int64_t wv = 0; wv < v.n_rows; ++wv)
            if (v.comp_slot[wv] == 0) v.comp_slot[wv] = used++;
    }

    // The numbered rows among [w0, w1) into their rows of comp, each run of consecutive selected
    // rows one decode_history_rows.
    void decode_numbered(const batch_seq& s, const seq_view& v, int64_t w0, int64_t w1) const {
        for (int64_t wv = w0; wv < w1;) {
            const int32_t slot = v.comp_slot[wv];
            if (slot < 0) {
                ++wv;
                continue;
            }
            int64_t end = wv + 1;
            while (end < w1 && v.comp_slot[end] >= 0) ++end;
            decode_history_rows(cp_, s.slot, cache::buffer_kind::compressed_kv, kv_fmt_, wv, end - wv,
                                &v.comp[int64_t{slot} * D_]);
            wv = end;
        }
    }

    // Row r's keys, in the order its weighted sum takes them: the window (the chunk's own rows, the
    // ring before them), then the compressed rows it selected — each as `chunk(row)`,
    // `ring(si, p)` or `compressed(si, wv)` gives it (si: the row's sequence).
    template <class Key, class Chunk, class Ring, class Compressed>
    void gather(int64_t r, std::vector<Key>& keys, Chunk chunk, Ring ring, Compressed compressed) const {
        const int64_t t = b_.pos[r];
        const size_t si = static_cast<size_t>(seq_of_[static_cast<size_t>(r)]);
        const batch_seq& s = b_.seqs[si];
        keys.clear();
        for (int64_t p = std::max<int64_t>(0, t - W_ + 1); p <= t; ++p)
            keys.push_back(p >= s.start_pos ? chunk(&kv_[(s.row0 + p - s.start_pos) * D_]) : ring(si, p));
        if (aw_.has_compressor)
            for (int32_t wv : selected_[static_cast<size_t>(r)]) keys.push_back(compressed(si, wv));
    }

    // The keys as fp32 rows: the chunk's, and the window and compressed rows read_state() and
    // decode_selected() decoded.
    template <class Key, class From>
    void gather_decoded(int64_t r, std::vector<Key>& keys, From from) const {
        gather(
            r, keys, from, [&](size_t si, int64_t p) { return from(&views_[si].window[(p % W_) * D_]); },
            [&](size_t si, int32_t wv) {
                const seq_view& v = views_[si];
                return from(&v.comp[int64_t{v.comp_slot[static_cast<size_t>(wv)]} * D_]);
            });
    }

    // One head's scores into probabilities, in place: the sink takes its share of the softmax.
    void softmax(float* lg, int64_t n, int64_t h, float scale) const {
        const float sink = aw_.sink.ptr()[h];
        const float mx = scale_and_max(lg, n, scale, sink);
        // exp_f32 (core/exp_f32.h), eight lanes at a time, not std::exp per key: the GPU's kernels
        // (cuda/host/kernel_math.h) run the same fma sequence, so their softmax is bitwise this one.
        float denom = cpu::exp_shifted(lg, n, mx);
        denom += exp_f32(sink - mx);
        for (int64_t j = 0; j < n; ++j) lg[j] = lg[j] / denom;
    }

    // Softmax with sink over {window rows by position, selected compressed rows by index}, per
    // (row, head); then the inverse RoPE at the query position.
    void attend() {
        if (tiles_) return attend_on_tiles();
        o_.assign(static_cast<size_t>(T_ * H_ * D_), 0.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
        m_.pool->parallel_for(T_ * H_, 1, [&](int64_t i0, int64_t i1) {
            thread_local std::vector<const float*> keys;
            thread_local std::vector<float> logit;
            thread_local std::vector<float> cs, sn;  // the inverse RoPE's cos / sin at the row's position
            cs.resize(rope_.inv_freq.size());
            sn.resize(rope_.inv_freq.size());
            int64_t keys_of = -1;  // the row `keys`, cs and sn hold: a piece's heads of one row share them
            for (int64_t i = i0; i < i1;) {
                const int64_t r = i / H_, h = i % H_;
                if (r != keys_of) {
                    gather_decoded(r, keys, [](const float* k) { return k; });
                    rope_.angles(b_.pos[r], true, cs.data(), sn.data());
                    keys_of = r;
                }
                // This head and, when the piece holds it, the row's next one: their scores in one
                // dots_heads call (two heads per register on AVX-512; the same bits either way).
                const int64_t heads = h + 1 < H_ && i + 1 < i1 ? 2 : 1, n = static_cast<int64_t>(keys.size());
                logit.resize(static_cast<size_t>(heads * n));
                cpu::dots_heads(&q_[i * D_], D_, heads, keys.data(), n, D_, logit.data(), n);
                for (int64_t e = 0; e < heads; ++e, ++i) {
                    float* lg = &logit[static_cast<size_t>(e * n)];
                    softmax(lg, n, h + e, scale);
                    float* oh = &o_[i * D_];
                    cpu::axpys(lg, keys.data(), n, oh, D_);
                    rope_.rotate(oh + N_, cs.data(), sn.data());  // K = V carried RoPE at the key position: undo at the query's
                }
            }
        });
    }

    // Row r's keys for the tiles: a bf16 cache's window and compressed rows as stored.
    void gather_key_rows(int64_t r, std::vector<cpu::key_row>& keys) const {
        const auto f32 = [](const float* k) { return cpu::key_row{k, false}; };
        if (!rows_in_place_) return gather_decoded(r, keys, f32);
        gather(
            r, keys, f32,
            [&](size_t si, int64_t p) {
                return cpu::key_row{cp_.window_ring(b_.seqs[si].slot) + (p % W_) * kv_fmt_.bytes, true};
            },
            [&](size_t si, int32_t wv) {
                return cpu::key_row{cp_.row(b_.seqs[si].slot, cache::buffer_kind::compressed_kv, wv), true};
            });
    }

    // Each row's scores and weighted sums for all its heads on tiles (cpu/attention_amx.h), the
    // softmax as in attend(). A row's bits depend on its own q and key list only, as there.
    void attend_on_tiles() {
        fit(o_, T_ * H_ * D_);  // every element written
        const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
        m_.pool->parallel_for(T_, 1, [&](int64_t r0, int64_t r1) {
            thread_local std::vector<cpu::key_row> keys;
            thread_local std::vector<float> logit;
            thread_local std::vector<float> cs, sn;
            thread_local cpu::amx_attention_row tiles;
            cs.resize(rope_.inv_freq.size());
            sn.resize(rope_.inv_freq.size());
            for (int64_t r = r0; r < r1; ++r) {
                gather_key_rows(r, keys);
                rope_.angles(b_.pos[r], true, cs.data(), sn.data());
                const int64_t n = static_cast<int64_t>(keys.size());
                logit.resize(static_cast<size_t>(H_ * n));
                tiles.load_keys(keys.data(), n, D_);
                tiles.scores(&q_[r * H_ * D_], H_, logit.data(), n);
                for (int64_t h = 0; h < H_; ++h) softmax(&logit[static_cast<size_t>(h * n)], n, h, scale);
                float* o = &o_[r * H_ * D_];
                tiles.weighted_sums(logit.data(), n, H_, o, D_);
                for (int64_t h = 0; h < H_; ++h) rope_.rotate(o + h * D_ + N_, cs.data(), sn.data());
            }
        });
    }

    // The chunk's kv rows enter the window ring only now (see the file comment).
    void write_window() {
        for (const batch_seq& s : b_.seqs)
            for (int64_t p = std::max(s.start_pos, s.start_pos + s.rows - W_); p < s.start_pos + s.rows; ++p) {
                std::byte* dst = cp_.window_row_for_write(s.slot, p);
                TANDEM_CHECK_MSG(dst != nullptr, "window write on a stale sequence slot");
                cache::codec::encode_row(kv_fmt_, std::span<const float>(&kv_[(s.row0 + p - s.start_pos) * D_], size_t(D_)),
                                         dst);
            }
    }

    // Grouped low-rank output projection: group g of the flattened heads → o_lora_rank, then wo_b.
    void output(std::vector<float>& out) {
        const int64_t g = c_.o_groups, ro = c_.o_lora_rank, gw = H_ * D_ / g;
        std::vector<float>& z = z_;
        fit(z, T_ * g * ro);
        linear_set groups(m_);  // wo_a reads bf16-dequantized weights in "official" too: no act quant
        for (int64_t gi = 0; gi < g; ++gi)
            groups.add(cpu::linear_job{o_.data() + gi * gw, T_, H_ * D_, aw_.wo_a.mat.slice_rows(gi * ro, ro),
                                       z.data() + gi * ro, g * ro});
        groups.run();
        m_.linear(z, T_, aw_.wo_b, out);
    }

    std::vector<float>&qr_, &q_, &kv_, &qi_, &iw_, &o_, &z_, &ckv_, &cg_, &ickv_, &icg_;
    attention_scratch& sc_;
    std::vector<seq_view>& views_;
    std::vector<int32_t>& seq_of_;
    std::vector<std::vector<int32_t>>& selected_;
    model_impl& m_;
    const model_config& c_;
    const layer_config& lc_;
    const attention_weights& aw_;
    const batch& b_;
    const std::vector<float>& x_;
    const cache::layer_view& cp_;  // the only handle on this layer's buffers (its gate's view)
    const cache::row_format& kv_fmt_;
    const cache::row_format& ik_fmt_;
    const int32_t lid_;
    const int64_t T_, H_, D_, R_, N_, W_, m_rate_, Di_, Hi_;
    const bool official_;
    // backend.cpu_matmul = "amx" with a bf16 or fp8 KV cache (its rows exactly bf16): each row's
    // scores and weighted sums for all its heads on tiles (attend_on_tiles). A bf16 cache's rows
    // then go to the tiles as they are stored: read_state() and decode_selected() decode nothing
    // (the window and the selected compressed rows were ~3% of a `small` batch-16 step's samples,
    // decoded to fp32 only to be converted back).
    const bool tiles_, rows_in_place_;
    const rope_table& rope_;
};

}  // namespace

void model_impl::attention(const cache::layer_view& view, const batch& b, const std::vector<float>& x,
                           std::vector<float>& out) {
    if (!attn_scratch) attn_scratch = std::make_shared<attention_scratch>();
    attention_pass(*this, *attn_scratch, view, b, x).run(out);
}

}  // namespace tandem::model
