// cuda/host/device_forward.cpp — creation, scratch, the block loop and the head.
#include "cuda/host/device_forward.h"

#include <fmt/format.h>

#include "model/forward.h"

namespace tandem::cuda {

result<std::unique_ptr<device_forward>> device_forward::create(device_runtime& ops, const model::model_config& cfg,
                                                               std::shared_ptr<const resident_weights> weights,
                                                               model::numerics_mode numerics) {
    if (cfg.hc_mult < 1 || cfg.hc_mult > 8)
        return make_error(error_code::invalid_argument, fmt::format("the device forward supports hc_mult 1..8 (config has {})", cfg.hc_mult));
    if (cfg.num_experts_per_tok > 16)
        return make_error(error_code::invalid_argument,
                          fmt::format("the device forward supports up to 16 experts per token (config has {})", cfg.num_experts_per_tok));
    if (!weights || static_cast<int64_t>(weights->w.layers.size()) != cfg.num_hidden_layers)
        return make_error(error_code::internal, "device forward: resident weights missing or not of this model's layers");
    std::unique_ptr<device_forward> f(new device_forward(ops, cfg, std::move(weights), numerics));
    auto table = [&](const model::rope_config& rc, device_buffer& dst, int64_t& half) -> status {
        const model::rope_table t = model::make_rope_table(rc, cfg.head_dim);
        half = static_cast<int64_t>(t.inv_freq.size());
        result<device_buffer> b = device_buffer::alloc(ops, half * 4, "RoPE table");
        if (!b) return b.error();
        dst = std::move(b.value());
        return ops.upload(dst.get(), t.inv_freq.data(), half * 4);
    };
    TANDEM_RETURN_IF_ERROR(table(cfg.rope_main, f->rope_main_, f->rope_half_main_));
    TANDEM_RETURN_IF_ERROR(table(cfg.rope_compress, f->rope_compress_, f->rope_half_compress_));
    return f;
}

template <typename T>
result<T*> device_forward::scratch(buf b, int64_t count) {
    const int64_t bytes = std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T));
    device_buffer& slot = scratch_[static_cast<size_t>(b)];
    if (slot.bytes() < bytes) {
        slot.reset();
        // Grow by half again so a slowly growing batch does not reallocate every step.
        result<device_buffer> nb = device_buffer::alloc(ops_, bytes + bytes / 2, "forward scratch");
        if (!nb) return nb.error();
        slot = std::move(nb.value());
    }
    return slot.get<T>();
}

template <typename T>
result<T*> device_forward::upload_scratch(buf b, std::span<const T> host) {
    result<T*> p = scratch<T>(b, static_cast<int64_t>(host.size()));
    if (!p) return p;
    TANDEM_RETURN_IF_ERROR(ops_.upload(*p, host.data(), static_cast<int64_t>(host.size_bytes())));
    return p;
}

template result<float*> device_forward::scratch<float>(buf, int64_t);
template result<int32_t*> device_forward::scratch<int32_t>(buf, int64_t);
template result<int64_t*> device_forward::scratch<int64_t>(buf, int64_t);
template result<int32_t*> device_forward::upload_scratch<int32_t>(buf, std::span<const int32_t>);
template result<int64_t*> device_forward::upload_scratch<int64_t>(buf, std::span<const int64_t>);
template result<float*> device_forward::upload_scratch<float>(buf, std::span<const float>);
template result<uint8_t**> device_forward::upload_scratch<uint8_t*>(buf, std::span<uint8_t* const>);
template result<float**> device_forward::upload_scratch<float*>(buf, std::span<float* const>);

status device_forward::linear(const float* x, int64_t rows, const dev_matrix& w, float* y) {
    const int64_t in = w.view.cols;
    if (official_ && w.act_quant) {
        result<float*> xq = scratch<float>(b_xq, rows * in);
        if (!xq) return xq.error();
        TANDEM_RETURN_IF_ERROR(ops_.copy(*xq, x, rows * in * 4));
        TANDEM_RETURN_IF_ERROR(ops_.act_quant_fp8(*xq, rows, in));
        x = *xq;
    }
    return ops_.linear(x, in, rows, w.view, y, w.view.rows);
}

status device_forward::run(const cache::layer_gate& gate, const step_metadata& meta,
                           std::span<const cache::slot_ref> slots, std::vector<float>& logits) {
    const int64_t T = meta.rows, n = cfg_.hc_mult, d = cfg_.hidden_size;
    if (static_cast<int64_t>(slots.size()) != static_cast<int64_t>(meta.item_rows.size()))
        return make_error(error_code::invalid_argument, "device forward: one slot per plan item");
    result<int32_t*> ids = upload_scratch<int32_t>(b_ids, meta.token);
    if (!ids) return ids.error();
    result<int64_t*> pos = upload_scratch<int64_t>(b_pos, meta.position);
    if (!pos) return pos.error();
    result<float*> h = scratch<float>(b_h, T * n * d);
    if (!h) return h.error();
    TANDEM_RETURN_IF_ERROR(ops_.embed_expand(w_.embed.view, *ids, T, n, *h));
    for (int64_t layer = 0; layer < cfg_.num_hidden_layers; ++layer) {
        result<cache::layer_view> view = gate.wait(static_cast<int32_t>(layer));
        if (!view) return view.error();
        TANDEM_RETURN_IF_ERROR(run_layer(*view, meta, slots).with_context(fmt::format("layer {}", layer)));
    }
    // Layers the pass does not run (MTP) are still the sequence's state (model.cpp): their loads
    // must have landed before the step counts as done.
    for (int64_t layer = cfg_.num_hidden_layers; layer < gate.layout().num_layers(); ++layer) {
        result<cache::layer_view> view = gate.wait(static_cast<int32_t>(layer));
        if (!view) return view.error();
    }
    TANDEM_RETURN_IF_ERROR(head(meta, logits));
    return ops_.synchronize();
}

status device_forward::run_layer(const cache::layer_view& view, const step_metadata& meta,
                                 std::span<const cache::slot_ref> slots) {
    const int64_t layer = view.layer(), T = meta.rows, n = cfg_.hc_mult, d = cfg_.hidden_size;
    const dev_layer& lw = w_.layers[static_cast<size_t>(layer)];
    hc_shape hs;
    hs.n = n, hs.d = d, hs.sinkhorn_iters = cfg_.hc_sinkhorn_iters;
    hs.norm_eps = static_cast<float>(cfg_.rms_norm_eps), hs.hc_eps = static_cast<float>(cfg_.hc_eps);
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    result<float*> h = scratch<float>(b_h, T * n * d), h2 = scratch<float>(b_h2, T * n * d), x = scratch<float>(b_x, T * d),
                   post = scratch<float>(b_post, T * n), comb = scratch<float>(b_comb, T * n * n),
                   sub = scratch<float>(b_sub, T * d);
    for (auto* r : {&h, &h2, &x, &post, &comb, &sub})
        if (!*r) return r->error();
    auto pre = [&](const dev_hc& hw, const dev_vector& norm) -> status {
        TANDEM_RETURN_IF_ERROR(ops_.hc_pre(hs, T, *h, hw.fn.p, hw.base.p, hw.scale.p, *x, *post, *comb));
        return ops_.rms_norm(*x, T, d, norm.p, eps, *x);
    };
    auto post_mix = [&]() -> status {
        TANDEM_RETURN_IF_ERROR(ops_.hc_post(n, d, T, *sub, *h, *post, *comb, *h2));
        return ops_.copy(*h, *h2, T * n * d * 4);
    };
    TANDEM_RETURN_IF_ERROR(pre(lw.hc_attn, lw.attn_norm));
    TANDEM_RETURN_IF_ERROR(attention(view, meta, slots, *x, *sub));
    TANDEM_RETURN_IF_ERROR(post_mix());
    TANDEM_RETURN_IF_ERROR(pre(lw.hc_ffn, lw.ffn_norm));
    TANDEM_RETURN_IF_ERROR(moe(layer, meta, *x, *sub));
    return post_mix();
}

status device_forward::head(const step_metadata& meta, std::vector<float>& logits) {
    const int64_t n = cfg_.hc_mult, d = cfg_.hidden_size, R = static_cast<int64_t>(meta.head_rows.size());
    const int64_t vocab = cfg_.vocab_size;
    model::fit(logits, R * vocab);  // the download below writes every element
    if (R == 0) return status::ok();
    std::vector<int32_t> rows(meta.head_rows.begin(), meta.head_rows.end());
    result<int32_t*> idx = upload_scratch<int32_t>(b_rows, rows);
    if (!idx) return idx.error();
    result<float*> h = scratch<float>(b_h, meta.rows * n * d), hr = scratch<float>(b_h2, R * n * d),
                   x = scratch<float>(b_x, R * d), out = scratch<float>(b_logits, R * vocab);
    for (auto* r : {&h, &hr, &x, &out})
        if (!*r) return r->error();
    TANDEM_RETURN_IF_ERROR(ops_.gather_rows(*h, n * d, *idx, R, *hr));
    hc_shape hs;
    hs.n = n, hs.d = d, hs.norm_eps = static_cast<float>(cfg_.rms_norm_eps), hs.hc_eps = static_cast<float>(cfg_.hc_eps);
    TANDEM_RETURN_IF_ERROR(ops_.hc_head(hs, R, *hr, w_.hc_head.fn.p, w_.hc_head.base.p, w_.hc_head.scale.p, *x));
    TANDEM_RETURN_IF_ERROR(ops_.rms_norm(*x, R, d, w_.norm.p, static_cast<float>(cfg_.rms_norm_eps), *x));
    TANDEM_RETURN_IF_ERROR(linear(*x, R, w_.head, *out));
    return ops_.download(logits.data(), *out, R * vocab * 4);
}

}  // namespace tandem::cuda
