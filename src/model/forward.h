// model/forward.h — (model/ internal) the pieces of the forward pass and what they share.
//
// A batch is a list of rows (one per new token, sequences back to back). Row-wise work (linears,
// norms, mHC, MoE) runs over all rows at once; attention and the compressors run per sequence,
// reading and extending its state in the cache pool. Every per-row result depends only on that row's
// inputs and its sequence's state, never on the other rows (batch invariance).
// Per-sequence state lives in the cache pool, which the forward pass never holds: layer l's
// buffers come only from the layer_view its gate hands out (cache/layer_gate.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/thread_pool.h"
#include "model/model.h"
#include "model/model_config.h"
#include "cache/layer_gate.h"
#include "model/weights.h"

namespace tandem::model {

// Inverse frequencies of one RoPE table (interleaved pairs over the trailing R dims).
struct rope_table {
    std::vector<float> inv_freq;  // [R/2]
    // Rotates x[0..R) (the rope slice) in place at position pos; inverse uses −sin.
    void apply(float* x, int64_t pos, bool inverse) const;
};
rope_table make_rope_table(const rope_config& r, int64_t head_dim);

struct batch_seq {
    int64_t row0 = 0, rows = 0, start_pos = 0;
    cache::slot_ref slot;
};

struct batch {
    int64_t rows = 0;
    std::vector<int32_t> token;  // [rows]
    std::vector<int64_t> pos;    // [rows]
    std::vector<batch_seq> seqs;
};

struct attention_scratch;  // attention.cpp: the attention pass's buffers, reused across layers and steps

class model_impl {
public:
    model_config cfg;
    model_weights w;
    model_options opt;
    std::unique_ptr<cpu::thread_pool> pool;
    rope_table rope_main, rope_compress;
    // Buffers of the attention pass (forward() runs on one thread at a time): sized by the
    // first steps, then only resized, so a steady decode allocates nothing there.
    std::shared_ptr<attention_scratch> attn_scratch;

    // h: [rows, n, d] residual streams, updated in place through every block.
    void run_layer(const cache::layer_view& view, const batch& b, std::vector<float>& h);
    // Final hc_head + norm + head for the chosen rows → [rows_out, vocab].
    void run_head(const std::vector<float>& h, const std::vector<int64_t>& rows, std::vector<float>& logits);

    // Attention sublayer: x [rows, d] (normed) → out [rows, d].
    void attention(const cache::layer_view& view, const batch& b, const std::vector<float>& x,
                   std::vector<float>& out);
    // MoE sublayer: x [rows, d] → out [rows, d].
    void moe(int64_t layer, const batch& b, const std::vector<float>& x, std::vector<float>& out);

    // y[rows, out] = x[rows, in] · Wᵀ
    void linear(const std::vector<float>& x, int64_t rows, const tensor& wt, std::vector<float>& y) const;
};

// mHC (dsv4-model.md §2.2) for one row: h [n, d] → collapsed [d], post [n], comb [n, n].
void hc_pre(const model_config& c, const hc_weights& hw, const float* h, float* collapsed, float* post, float* comb);
void hc_post(int64_t n, int64_t d, const float* out, const float* h_res, const float* post, const float* comb,
             float* h_new);
// Final collapse without Sinkhorn.
void hc_head_collapse(const model_config& c, const hc_weights& hw, const float* h, float* x);

}  // namespace tandem::model
