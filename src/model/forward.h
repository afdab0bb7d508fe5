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

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "model/model.h"
#include "model/model_config.h"
#include "cache/layer_gate.h"
#include "model/weights.h"

namespace tandem::model {

// Resizes a step buffer to n elements, growing its storage to exactly n when it must grow
// (std::vector::resize may double it): a step buffer's capacity is then the largest size any step
// asked of it, which is what model::step_buffer_bytes() reports and step_buffer_bound()
// (model/step_memory.h) bounds.
template <class T>
void fit(std::vector<T>& v, int64_t n) {
    const auto want = static_cast<size_t>(n);
    if (want > v.capacity()) v.reserve(want);
    v.resize(want);
}

// fit() for a buffer only ever read through pointers into it, never by its size(): the size never
// shrinks, so a step's CSA layer after its HCA layer (a few hundred KB more compressed rows) does not
// zero the difference again, which resize() would (a batch-16 step of `small`: ~1 MB a step).
template <class T>
void fit_at_least(std::vector<T>& v, int64_t n) {
    if (static_cast<size_t>(n) > v.size()) fit(v, n);
}

// Inverse frequencies of one RoPE table (interleaved pairs over the trailing R dims).
struct rope_table {
    std::vector<float> inv_freq;  // [R/2]
    // Rotates x[0..R) (the rope slice) in place at position pos; inverse uses −sin.
    void apply(float* x, int64_t pos, bool inverse) const;
    // apply() in two parts, for many vectors at one position (a row's heads): cs / sn [R/2] get
    // the cosines and sines once (sines negated for the inverse), rotate() uses them. The same
    // bits as apply().
    void angles(int64_t pos, bool inverse, float* cs, float* sn) const;
    void rotate(float* x, const float* cs, const float* sn) const;
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

// The indexer's scoring (indexer.cpp, select_block): queries of one sequence that share each
// decoded chunk of its index rows, and the chunk's rows (at V4-Flash's Di = 128: 16 KB of fp32,
// in L1 while the block's queries score it; the scoring was ~1% of a 2048-token `small` prefill at
// 32 rows and at 128 alike, and 32 puts chunk boundaries inside the golden and consistency tests'
// prompts). Per pool thread, so step_buffer_bound counts them.
constexpr int64_t k_index_queries = 8;
constexpr int64_t k_index_chunk = 32;

// History rows [first, first + n) of `kind` of one sequence in a layer's pool buffers, decoded into
// out[n, fmt.dims]: one codec::decode_rows per page (attention.cpp; the indexer reads its rows so too).
void decode_history_rows(const cache::layer_view& view, cache::slot_ref slot, cache::buffer_kind kind,
                         const cache::row_format& fmt, int64_t first, int64_t n, float* out);

struct attention_scratch;  // attention.cpp: the attention pass's buffers, reused across layers and steps
struct moe_scratch;        // moe.cpp: the MoE sublayer's buffers, reused across layers and steps
// Bytes each set's buffers hold (their capacities): model::step_buffer_bytes() adds them up.
int64_t held_bytes(const attention_scratch& sc);
int64_t held_bytes(const moe_scratch& sc);

// Bytes a vector's storage holds, and several vectors' together.
template <class T>
int64_t held_bytes(const std::vector<T>& v) {
    return static_cast<int64_t>(v.capacity() * sizeof(T));
}
template <class... V>
int64_t held_bytes_of(const V&... v) {
    return (held_bytes(v) + ...);
}

// The block loop's buffers (model.cpp), reused across layers and steps.
struct step_scratch {
    batch b;
    std::vector<float> h;                      // [rows, n, d] residual streams
    std::vector<float> x, post, comb, sub;     // one sublayer's input, mHC post/comb, its output
    std::vector<float> hc_xn, hc_mix;          // [rows, n·d] normed streams, [rows, (2 + n)·n] mixes
    std::vector<int64_t> head_rows;
    std::vector<float> logits;
};

class model_impl;

// Linears queued and then run as ONE cpu::linear_group pass (one fork/join instead of one per
// linear: a decode step's linears are small, and on a shared 2-core machine every join can wait
// a scheduler tick for a descheduled worker). Results are bitwise what model_impl::linear gives
// each alone, numerics "official" included (a tensor stored FP8/FP4 reads an FP8-simulated copy of
// its input, made once per input). Buffers are the model's and only grow: no allocation per step.
class linear_set {
public:
    explicit linear_set(model_impl& m);
    // y[rows, wt.rows] = x[rows, wt.cols] · Wᵀ, y resized here; x must stay unchanged until run().
    void add(const std::vector<float>& x, int64_t rows, const tensor& wt, std::vector<float>& y);
    // A raw job (strided views, no activation quantization).
    void add(const cpu::linear_job& job);
    void run();

private:
    const float* quantized(const std::vector<float>& x, int64_t rows, int64_t width);
    model_impl& m_;
    size_t quantized_used_ = 0;
};

// linear_set's buffers (one set per model: one forward at a time, one set alive at a time).
struct linear_set_buffers {
    std::vector<cpu::linear_job> jobs;
    std::vector<const float*> quantized_src;     // input of each quantized copy
    std::vector<std::vector<float>> quantized;   // the copies (kept, never shrunk)
};

class model_impl {
public:
    // Starts the worker pool and builds the RoPE tables; the weights may be another model's.
    model_impl(model_config c, std::shared_ptr<const model_weights> ws, const model_options& o);

    model_config cfg;
    std::shared_ptr<const model_weights> weights;  // read-only; shared by model::sharing_weights()
    const model_weights& w;                        // *weights
    model_options opt;
    std::unique_ptr<cpu::thread_pool> pool;
    rope_table rope_main, rope_compress;
    // Buffers of the attention pass (forward() runs on one thread at a time): sized by the
    // first steps, then only resized, so a steady decode allocates nothing there.
    std::shared_ptr<attention_scratch> attn_scratch;
    std::shared_ptr<moe_scratch> moe_buf;
    step_scratch step;
    linear_set_buffers linear_buf;

    // h: [rows, n, d] residual streams, updated in place through every block (buffers: step).
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
// hc_pre = hc_norm_input, hc_mix_range over all (2 + n)·n mixes, hc_pre_from_mix; the block loop
// runs the three phases itself so a decode step's mixes (each a dot over n·d fp32 weights) are
// spread over the threads — bitwise the same, every mix is one dot in dot's order.
void hc_pre(const model_config& c, const hc_weights& hw, const float* h, float* collapsed, float* post, float* comb);
void hc_norm_input(const model_config& c, const float* h, float* xn);  // xn [n·d] = rmsnorm(flatten(h))
// mix[j − j0] = fn[j] · xn for j0 ≤ j < j1.
void hc_mix_range(const model_config& c, const tensor& fn, const float* xn, int64_t j0, int64_t j1, float* mix);
void hc_pre_from_mix(const model_config& c, const hc_weights& hw, const float* h, const float* mix, float* collapsed,
                     float* post, float* comb);
void hc_post(int64_t n, int64_t d, const float* out, const float* h_res, const float* post, const float* comb,
             float* h_new);
// Final collapse without Sinkhorn.
void hc_head_collapse(const model_config& c, const hc_weights& hw, const float* h, float* x);

}  // namespace tandem::model
