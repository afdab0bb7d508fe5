// model/indexer.cpp — see indexer.h.
#include "model/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "model/top_k.h"

namespace tandem::model {

namespace {

class index_selector {
public:
    index_selector(const index_inputs& in, std::vector<std::vector<int32_t>>& selected) : in_(in), selected_(selected) {}

    // Which compressed rows each query attends to: all visible ones (HCA, or CSA with few rows),
    // else the lightning indexer's top-k. Work comes in blocks of up to k_index_queries queries of
    // one sequence (consecutive rows, so the last sees the most rows). With a block for every
    // thread (prefill, batched decode) each thread takes whole blocks. With fewer (a lone decode
    // query; two sequences on four threads) the blocks go one after the other and each block's
    // key chunks are split over the threads: a lone query at a long context scores every
    // compressed row of the layer (V4-Flash at 1M tokens: 250K rows × 64 heads × 128), which
    // otherwise ran on one thread while the others waited. Either way a score is computed within
    // its own chunk (score_chunk), so the split changes no bit.
    void run() {
        if (selected_.size() < static_cast<size_t>(in_.b.rows)) selected_.resize(static_cast<size_t>(in_.b.rows));
        int64_t blocks = 0;
        for (const batch_seq& s : in_.b.seqs) blocks += (s.rows + k_index_queries - 1) / k_index_queries;
        if (blocks < in_.pool.size()) {
            for (const batch_seq& s : in_.b.seqs)
                for (int64_t r = s.row0; r < s.row0 + s.rows; r += k_index_queries)
                    select_block(s, r, std::min(s.row0 + s.rows, r + k_index_queries), true);
            return;
        }
        in_.pool.parallel_for(in_.b.rows, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1;) {
                const batch_seq& s = in_.b.seqs[static_cast<size_t>(in_.seq_of[static_cast<size_t>(r)])];
                const int64_t end = std::min({r1, s.row0 + s.rows, r + k_index_queries});
                select_block(s, r, end, false);
                r = end;
            }
        });
    }

private:
    // A pool thread's indexer buffers (step_buffer_bound counts one set per thread): a block's
    // scores, and one chunk of decoded index rows with their pointers and two heads' dots.
    struct index_buffers {
        std::vector<float> scores, keys, dp;
        std::vector<const float*> key_at;
    };
    index_buffers& thread_index_buffers() const {
        thread_local index_buffers ib;
        fit(ib.keys, k_index_chunk * in_.dim);
        fit(ib.dp, 2 * k_index_chunk);
        fit(ib.key_at, k_index_chunk);
        // Re-pointed only when the buffer moved or the row width changed (another model, same thread).
        if (ib.key_at[0] != ib.keys.data() || ib.key_at[1] != ib.keys.data() + in_.dim)
            for (int64_t j = 0; j < k_index_chunk; ++j)
                ib.key_at[static_cast<size_t>(j)] = &ib.keys[static_cast<size_t>(j * in_.dim)];
        return ib;
    }

    int64_t visible_of(int64_t r) const { return (in_.b.pos[r] + 1) / in_.rate; }

    // Rows [r0, r1) of sequence s. The indexer's rows are decoded a chunk of k_index_chunk at a
    // time into a per-thread buffer and scored there by every query of the block that sees them:
    // never the whole history of every sequence at once (at a pool of millions of tokens that
    // was the largest buffer of a step: Di × 4 bytes per 4 tokens of context), and each chunk is
    // decoded once per block, not once per query. `split`: the chunks run on every thread (the
    // caller holds the block's scores), else all on this one.
    void select_block(const batch_seq& s, int64_t r0, int64_t r1, bool split) {
        int64_t first_scored = r1;
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t visible = visible_of(r);
            auto& sel = selected_[static_cast<size_t>(r)];
            sel.clear();
            if (in_.scores && visible > in_.top_k) {
                first_scored = std::min(first_scored, r);
                continue;
            }
            fit(sel, visible);
            std::iota(sel.begin(), sel.end(), 0);
        }
        if (first_scored == r1) return;
        const int64_t most = visible_of(r1 - 1);  // positions ascend within a sequence's rows
        std::vector<float>& scores = thread_index_buffers().scores;
        scores.assign(static_cast<size_t>((r1 - first_scored) * most), 0.0f);
        const int64_t chunks = (most + k_index_chunk - 1) / k_index_chunk;
        auto score_chunks = [&](int64_t c0, int64_t c1) {
            index_buffers& ib = thread_index_buffers();
            for (int64_t c = c0; c < c1; ++c) score_chunk(s, first_scored, r1, most, c * k_index_chunk, ib, scores.data());
        };
        if (split) in_.pool.parallel_for(chunks, 1, score_chunks);
        else score_chunks(0, chunks);
        for (int64_t r = first_scored; r < r1; ++r)
            top_k_ascending(std::span<const float>(&scores[static_cast<size_t>((r - first_scored) * most)],
                                                   static_cast<size_t>(visible_of(r))),
                            in_.top_k, selected_[static_cast<size_t>(r)]);
    }

    // Index rows [c0, c0 + k_index_chunk) scored by the block's queries [first, r1) that see them,
    // into scores[(r − first) · most + row]:
    // score[wv] = Σ_h (max(q_h · k_wv, 0) · idx_scale) · (w_h · head_scale), h ascending: each row's
    // score is added up within its own chunk, so the chunking changes no bit. Two heads' dots
    // against the chunk at a time go through cpu::dots_heads (independent chains, each dot in
    // cpu::dot's order; the AVX-512 kernels score both heads in one register) rather than one
    // latency-bound dot per (row, head).
    void score_chunk(const batch_seq& s, int64_t first, int64_t r1, int64_t most, int64_t c0, index_buffers& ib,
                     float* scores) const {
        const float idx_scale = 1.0f / std::sqrt(static_cast<float>(in_.dim));
        const float head_scale = 1.0f / std::sqrt(static_cast<float>(in_.heads));
        const int64_t n = std::min(k_index_chunk, most - c0);
        decode_history_rows(in_.view, s.slot, cache::buffer_kind::index_k, in_.fmt, c0, n, ib.keys.data());
        for (int64_t r = first; r < r1; ++r) {
            const int64_t count = std::min(n, visible_of(r) - c0);
            if (count <= 0) continue;  // an earlier query of the block: it sees fewer rows
            float* score = &scores[static_cast<size_t>((r - first) * most + c0)];
            for (int64_t h0 = 0; h0 < in_.heads; h0 += 2) {
                const int64_t heads = std::min<int64_t>(2, in_.heads - h0);
                cpu::dots_heads(&in_.qi[(r * in_.heads + h0) * in_.dim], in_.dim, heads, ib.key_at.data(), count, in_.dim, ib.dp.data(), count);
                for (int64_t h = h0; h < h0 + heads; ++h) {
                    const float head_weight = in_.iw[r * in_.heads + h] * head_scale;
                    const float* d = &ib.dp[static_cast<size_t>((h - h0) * count)];
                    for (int64_t j = 0; j < count; ++j) score[j] += (std::max(d[j], 0.0f) * idx_scale) * head_weight;
                }
            }
        }
    }

    const index_inputs& in_;
    std::vector<std::vector<int32_t>>& selected_;
};

}  // namespace

void select_compressed_rows(const index_inputs& in, std::vector<std::vector<int32_t>>& selected) {
    index_selector(in, selected).run();
}

}  // namespace tandem::model
