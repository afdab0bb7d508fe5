#include "cuda/host/device_weights.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/host/kernel_views.h"

namespace tandem::cuda {

namespace {

class uploader {
public:
    uploader(device_runtime& ops, device_weights& out) : ops_(ops), out_(out) {}

    status bytes(const void* host, int64_t n, const void** dst) {
        *dst = nullptr;
        if (n <= 0) return status::ok();
        result<device_buffer> b = device_buffer::alloc(ops_, n, "uploading weights");
        if (!b) return b.error();
        TANDEM_RETURN_IF_ERROR(ops_.upload(b->get(), host, n));
        *dst = b->get();
        out_.bytes += n;
        out_.owned.push_back(std::move(b.value()));
        return status::ok();
    }
    status matrix(const model::tensor& t, dev_matrix& m) {
        m.act_quant = t.act_quant;
        m.view = weight_view_of(t.mat);
        const weight_extent e = stored_extent(m.view);
        const void* d = nullptr;
        TANDEM_RETURN_IF_ERROR(bytes(t.mat.data, e.data, &d));
        m.view.data = static_cast<const uint8_t*>(d);
        TANDEM_RETURN_IF_ERROR(bytes(t.mat.scales, e.scales, &d));
        m.view.scales = static_cast<const uint8_t*>(d);
        return status::ok();
    }
    status vector(const model::tensor& t, dev_vector& v) {
        v.n = static_cast<int64_t>(t.data.size());
        const void* d = nullptr;
        TANDEM_RETURN_IF_ERROR(bytes(t.data.data(), v.n * 4, &d));
        v.p = static_cast<const float*>(d);
        return status::ok();
    }
    // Several tensors of one kind, in order; the first failure stops.
    using matrix_pairs = std::initializer_list<std::pair<const model::tensor*, dev_matrix*>>;
    using vector_pairs = std::initializer_list<std::pair<const model::tensor*, dev_vector*>>;
    status matrices(matrix_pairs pairs) {
        for (auto [src, dst] : pairs) TANDEM_RETURN_IF_ERROR(matrix(*src, *dst));
        return status::ok();
    }
    status vectors(vector_pairs pairs) {
        for (auto [src, dst] : pairs) TANDEM_RETURN_IF_ERROR(vector(*src, *dst));
        return status::ok();
    }
    status hc(const model::hc_weights& h, dev_hc& d) { return vectors({{&h.fn, &d.fn}, {&h.base, &d.base}, {&h.scale, &d.scale}}); }
    status compressor(const model::compressor_weights& c, dev_compressor& d) {
        TANDEM_RETURN_IF_ERROR(matrices({{&c.wkv, &d.wkv}, {&c.wgate, &d.wgate}}));
        return vectors({{&c.ape, &d.ape}, {&c.norm, &d.norm}});
    }
    status expert(const model::expert_weights& e, dev_expert& d) { return matrices({{&e.w1, &d.w1}, {&e.w2, &d.w2}, {&e.w3, &d.w3}}); }
    status attention(const model::attention_weights& a, dev_attention& d) {
        TANDEM_RETURN_IF_ERROR(
            matrices({{&a.wq_a, &d.wq_a}, {&a.wq_b, &d.wq_b}, {&a.wkv, &d.wkv}, {&a.wo_a, &d.wo_a}, {&a.wo_b, &d.wo_b}}));
        TANDEM_RETURN_IF_ERROR(vectors({{&a.q_norm, &d.q_norm}, {&a.kv_norm, &d.kv_norm}, {&a.sink, &d.sink}}));
        d.has_compressor = a.has_compressor;
        d.has_indexer = a.has_indexer;
        if (a.has_compressor) TANDEM_RETURN_IF_ERROR(compressor(a.compressor, d.compressor));
        if (!a.has_indexer) return status::ok();
        TANDEM_RETURN_IF_ERROR(compressor(a.idx_compressor, d.idx_compressor));
        return matrices({{&a.idx_wq_b, &d.idx_wq_b}, {&a.idx_weights_proj, &d.idx_weights_proj}});
    }
    status moe(const model::moe_weights& m, dev_moe& d) {
        TANDEM_RETURN_IF_ERROR(matrix(m.gate, d.gate));
        TANDEM_RETURN_IF_ERROR(vector(m.bias, d.bias));
        const void* t = nullptr;
        TANDEM_RETURN_IF_ERROR(bytes(m.tid2eid.data(), static_cast<int64_t>(m.tid2eid.size()) * 4, &t));
        d.tid2eid = static_cast<const int32_t*>(t);
        d.experts.resize(m.experts.size());
        for (size_t e = 0; e < m.experts.size(); ++e) TANDEM_RETURN_IF_ERROR(expert(m.experts[e], d.experts[e]));
        return expert(m.shared, d.shared);
    }

private:
    device_runtime& ops_;
    device_weights& out_;
};

}  // namespace

result<device_weights> upload_weights(device_runtime& ops, const model::model_weights& w, int64_t layers) {
    device_weights d;
    uploader up(ops, d);
    TANDEM_RETURN_IF_ERROR(up.matrix(w.embed, d.embed));
    TANDEM_RETURN_IF_ERROR(up.matrix(w.head, d.head));
    TANDEM_RETURN_IF_ERROR(up.vector(w.norm, d.norm));
    TANDEM_RETURN_IF_ERROR(up.hc(w.hc_head, d.hc_head));
    d.layers.resize(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
        const model::layer_weights& lw = w.layers[static_cast<size_t>(l)];
        dev_layer& dl = d.layers[static_cast<size_t>(l)];
        TANDEM_RETURN_IF_ERROR(up.hc(lw.hc_attn, dl.hc_attn));
        TANDEM_RETURN_IF_ERROR(up.hc(lw.hc_ffn, dl.hc_ffn));
        TANDEM_RETURN_IF_ERROR(up.vector(lw.attn_norm, dl.attn_norm));
        TANDEM_RETURN_IF_ERROR(up.vector(lw.ffn_norm, dl.ffn_norm));
        TANDEM_RETURN_IF_ERROR(up.attention(lw.attn, dl.attn).with_context("layer " + std::to_string(l)));
        TANDEM_RETURN_IF_ERROR(up.moe(lw.moe, dl.moe).with_context("layer " + std::to_string(l)));
    }
    return d;
}

result<std::shared_ptr<const resident_weights>> upload_resident(std::shared_ptr<device_runtime> ops,
                                                               const model::model_weights& w, int64_t layers,
                                                               std::string model_dir) {
    auto r = std::make_shared<resident_weights>();
    result<device_weights> d = upload_weights(*ops, w, layers);
    if (!d) return d.error();
    r->ops = std::move(ops);
    r->w = std::move(d.value());
    r->model_dir = std::move(model_dir);
    return std::shared_ptr<const resident_weights>(std::move(r));
}

}  // namespace tandem::cuda
