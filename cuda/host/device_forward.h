// cuda/host/device_forward.h — The DeepSeek-V4 forward pass over device_runtime: weights resident in
// the device space, per-sequence state in a cache::page_pool whose arena lives in that space.
//
// The pool keeps metadata, free lists and epochs on the host (cache/page_pool.h); this pass asks
// it (through the layer gate's views) for the address of every row it reads or writes — a write
// names (page, epoch) and a stale one is refused before any kernel runs — and hands the kernels
// those addresses as lists. Host-side planning per layer: which window and compressed rows each
// token sees (step_metadata + ratios), which compressor slots a token fills and which windows it
// closes, which compressed rows each query reads, and the MoE grouping by expert (K5 as one
// linear per expert over its gathered rows). The indexer's top-k (K12) runs on the device and its
// ids stay there; only rows whose k-th boundary is an exact tie come back to the host for the
// CPU's own selection (select_compressed, kernel_math.h top_k_row).
//
// Op order and state semantics are model/attention.cpp's, model/moe.cpp's and model/blocks.cpp's,
// line for line, so with the emulated ops the logits equal the CPU model's bit for bit
// (test/unit/cuda/test_device_forward.cpp); what the device changes is only its libm (tier 2).
// Phase-1 costs, admitted: the window and compressed rows a step reads are decoded into fp32 key
// rows per layer (only those some query of the step reads, but once per layer, not cached), and
// every key list is planned on the host and uploaded per layer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/layer_gate.h"
#include "core/status.h"
#include "cuda/host/device_runtime.h"
#include "cuda/host/device_weights.h"
#include "cuda/host/step_metadata.h"
#include "model/model.h"
#include "model/weights.h"

namespace tandem::cuda {

class device_forward {
public:
    // Over weights already resident in ops' space (upload_resident: the cfg.num_hidden_layers
    // layers the forward runs), which this forward holds for its lifetime.
    static result<std::unique_ptr<device_forward>> create(device_runtime& ops, const model::model_config& cfg,
                                                          std::shared_ptr<const resident_weights> weights,
                                                          model::numerics_mode numerics);

    // One step: meta's rows, item i's state in slots[i] (current, capacity ensured, as the CPU
    // model's caller contract). logits: [meta.head_rows.size(), vocab] on the host.
    status run(const cache::layer_gate& gate, const step_metadata& meta, std::span<const cache::slot_ref> slots,
               std::vector<float>& logits);

    // K12 rows since creation: scored on the device, and of those the ones whose exact boundary
    // tie sent them to the host selection.
    struct top_k_counts {
        int64_t rows = 0, host_rows = 0;
    };
    top_k_counts top_k_stats() const { return top_k_; }

    const model::model_config& config() const { return cfg_; }
    int64_t weight_bytes() const { return w_.bytes; }

private:
    device_forward(device_runtime& ops, const model::model_config& cfg, std::shared_ptr<const resident_weights> weights,
                   model::numerics_mode numerics)
        : ops_(ops), cfg_(cfg), official_(numerics == model::numerics_mode::official), weights_(std::move(weights)),
          w_(weights_->w) {}

    // Per-step device scratch: one growable buffer per use; a pointer stays valid until the
    // next request for the same slot.
    enum buf : int {
        b_ids, b_pos, b_h, b_h2, b_x, b_post, b_comb, b_sub, b_qr, b_kv, b_q, b_o, b_z, b_xq, b_ckv, b_cg, b_pooled,
        b_emit_pos, b_qi, b_iw, b_scores, b_keys, b_key_idx, b_n_keys, b_idx_rows, b_addr, b_addr2, b_rt_exp, b_rt_w,
        b_tok, b_xe, b_g, b_u, b_act, b_y, b_contrib, b_shared, b_rows, b_weights, b_logits, b_rings, b_seq, b_sel,
        b_tied, b_keep, b_at, b_base, b_count
    };
    // Which compressed rows each query of a layer reads: host[r] when the host knows them (all
    // visible rows), else (on_device[r]) K12's ids in device[r · index_topk ..], index_topk of them.
    struct selection {
        std::vector<std::vector<int32_t>> host;
        std::vector<uint8_t> on_device;
        int32_t* device = nullptr;
    };
    template <typename T>
    result<T*> scratch(buf b, int64_t count);
    template <typename T>
    result<T*> upload_scratch(buf b, std::span<const T> host);

    // model_impl::linear: y[rows, out] = x · Wᵀ, the activations FP8-QDQ'd first in official numerics.
    status linear(const float* x, int64_t rows, const dev_matrix& w, float* y);
    status run_layer(const cache::layer_view& view, const step_metadata& meta, std::span<const cache::slot_ref> slots);
    status attention(const cache::layer_view& view, const step_metadata& meta, std::span<const cache::slot_ref> slots,
                     const float* x, float* out);
    status compress(const cache::layer_view& view, const step_metadata& meta, std::span<const cache::slot_ref> slots,
                    const float* x, const dev_compressor& cw, int64_t dim, bool overlap, bool indexer);
    status select_compressed(const cache::layer_view& view, const step_metadata& meta,
                             std::span<const cache::slot_ref> slots, selection& sel);
    status moe(int64_t layer, const step_metadata& meta, const float* x, float* out);
    status head(const step_metadata& meta, std::vector<float>& logits);

    device_runtime& ops_;
    model::model_config cfg_;
    bool official_;
    std::shared_ptr<const resident_weights> weights_;  // shared with the other engine of pd role both
    const device_weights& w_;
    device_buffer rope_main_, rope_compress_;  // inv_freq tables
    int64_t rope_half_main_ = 0, rope_half_compress_ = 0;
    std::vector<device_buffer> scratch_ = std::vector<device_buffer>(b_count);
    std::vector<uint8_t> host_rows_;  // routing results downloaded for the grouping
    top_k_counts top_k_;
};

}  // namespace tandem::cuda
