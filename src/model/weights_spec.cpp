// model/weights_spec.cpp — names and shapes of every DeepSeek-V4 tensor (dsv4-model.md §4).
#include "model/weights_spec.h"

#include <fmt/format.h>

namespace tandem::model::detail {

namespace {

struct layer_enumerator {
    const model_config& c;
    std::vector<weight_slot>& out;
    std::string up;  // "layers.3." or "mtp.0."
    std::string hf;  // "model.layers.3." or "" (no HF name)
    bool mtp = false;
    int64_t layer = 0;

    void add(const std::string& up_suffix, const std::string& hf_suffix, std::vector<int64_t> shape,
             weight_kind kind, tensor* target) {
        weight_slot s;
        s.name = up + up_suffix;
        s.hf_name = (hf.empty() || hf_suffix.empty()) ? "" : hf + hf_suffix;
        s.shape = std::move(shape);
        s.kind = kind;
        s.target = target;
        s.mtp = mtp;
        s.layer = layer;
        out.push_back(std::move(s));
    }

    void hc(const std::string& site, const std::string& hf_site, hc_weights& h) {
        int64_t n = c.hc_mult, mix = (2 + n) * n;
        add("hc_" + site + "_fn", hf_site + ".fn", {mix, n * c.hidden_size}, weight_kind::vector, &h.fn);
        add("hc_" + site + "_base", hf_site + ".base", {mix}, weight_kind::vector, &h.base);
        add("hc_" + site + "_scale", hf_site + ".scale", {3}, weight_kind::vector, &h.scale);
    }

    void compressor(const std::string& up_p, const std::string& hf_p, int64_t dim, int64_t ratio,
                    bool overlap, compressor_weights& cw) {
        int64_t cd = (overlap ? 2 : 1) * dim, d = c.hidden_size;
        add(up_p + "wkv.weight", hf_p + "kv_proj.weight", {cd, d}, weight_kind::linear, &cw.wkv);
        add(up_p + "wgate.weight", hf_p + "gate_proj.weight", {cd, d}, weight_kind::linear, &cw.wgate);
        add(up_p + "ape", hf_p + "position_bias", {ratio, cd}, weight_kind::vector, &cw.ape);
        add(up_p + "norm.weight", hf_p + "kv_norm.weight", {dim}, weight_kind::vector, &cw.norm);
    }

    void attention(const layer_config& lc, attention_weights& a) {
        int64_t d = c.hidden_size, H = c.num_attention_heads, D = c.head_dim;
        int64_t g = c.o_groups, ro = c.o_lora_rank;
        add("attn.wq_a.weight", "self_attn.q_a_proj.weight", {c.q_lora_rank, d}, weight_kind::linear, &a.wq_a);
        add("attn.q_norm.weight", "self_attn.q_a_norm.weight", {c.q_lora_rank}, weight_kind::vector, &a.q_norm);
        add("attn.wq_b.weight", "self_attn.q_b_proj.weight", {H * D, c.q_lora_rank}, weight_kind::linear, &a.wq_b);
        add("attn.wkv.weight", "self_attn.kv_proj.weight", {D, d}, weight_kind::linear, &a.wkv);
        add("attn.kv_norm.weight", "self_attn.kv_norm.weight", {D}, weight_kind::vector, &a.kv_norm);
        add("attn.wo_a.weight", "self_attn.o_a_proj.weight", {g * ro, H * D / g}, weight_kind::linear, &a.wo_a);
        add("attn.wo_b.weight", "self_attn.o_b_proj.weight", {d, g * ro}, weight_kind::linear, &a.wo_b);
        add("attn.attn_sink", "self_attn.sinks", {H}, weight_kind::vector, &a.sink);
        if (lc.attention == attention_type::sliding) return;
        a.has_compressor = true;
        bool csa = lc.attention == attention_type::csa;
        compressor("attn.compressor.", "self_attn.compressor.", D, lc.compress_ratio, csa, a.compressor);
        if (!csa) return;
        a.has_indexer = true;
        int64_t hi = c.index_n_heads, di = c.index_head_dim;
        add("attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight", {hi * di, c.q_lora_rank},
            weight_kind::linear, &a.idx_wq_b);
        add("attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight", {hi, d},
            weight_kind::linear, &a.idx_weights_proj);
        compressor("attn.indexer.compressor.", "self_attn.compressor.indexer.", di, lc.compress_ratio, true,
                   a.idx_compressor);
    }

    void moe(const layer_config& lc, moe_weights& m) {
        int64_t d = c.hidden_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
        add("ffn.gate.weight", "mlp.gate.weight", {E, d}, weight_kind::linear, &m.gate);
        if (lc.mlp == mlp_type::moe) {
            add("ffn.gate.bias", "mlp.gate.e_score_correction_bias", {E}, weight_kind::vector, &m.bias);
        } else {
            add("ffn.gate.tid2eid", "mlp.gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, weight_kind::index,
                nullptr);
            out.back().index_target = &m.tid2eid;
        }
        m.experts.resize(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
            auto& ex = m.experts[static_cast<size_t>(e)];
            std::string p = fmt::format("ffn.experts.{}.", e);
            const std::pair<int, tensor*> parts[] = {{1, &ex.w1}, {2, &ex.w2}, {3, &ex.w3}};
            for (auto [which, t] : parts) {
                std::vector<int64_t> shape = which == 2 ? std::vector<int64_t>{d, I} : std::vector<int64_t>{I, d};
                add(p + fmt::format("w{}.weight", which), "", shape, weight_kind::expert, t);
                out.back().expert = e;
                out.back().which = which;
            }
        }
        add("ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight", {I, d}, weight_kind::linear,
            &m.shared.w1);
        add("ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight", {d, I}, weight_kind::linear,
            &m.shared.w2);
        add("ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight", {I, d}, weight_kind::linear,
            &m.shared.w3);
    }

    void mtp_extras(mtp_weights& m) {
        int64_t d = c.hidden_size, n = c.hc_mult;
        add("e_proj.weight", "", {d, d}, weight_kind::linear, &m.e_proj);
        add("h_proj.weight", "", {d, d}, weight_kind::linear, &m.h_proj);
        add("enorm.weight", "", {d}, weight_kind::vector, &m.enorm);
        add("hnorm.weight", "", {d}, weight_kind::vector, &m.hnorm);
        add("norm.weight", "", {d}, weight_kind::vector, &m.norm);
        add("hc_head_fn", "", {n, n * d}, weight_kind::vector, &m.hc_head.fn);
        add("hc_head_base", "", {n}, weight_kind::vector, &m.hc_head.base);
        add("hc_head_scale", "", {1}, weight_kind::vector, &m.hc_head.scale);
    }
};

}  // namespace

std::vector<weight_slot> enumerate_weights(const model_config& c, model_weights& w) {
    std::vector<weight_slot> out;
    int64_t d = c.hidden_size, n = c.hc_mult;
    w.layers.assign(c.layers.size(), layer_weights{});
    layer_enumerator top{c, out, "", "", false, -1};
    auto add_top = [&](const char* up, const char* hf, std::vector<int64_t> shape, weight_kind k, tensor* t) {
        top.add(up, "", std::move(shape), k, t);
        out.back().hf_name = hf;
    };
    add_top("embed.weight", "model.embed_tokens.weight", {c.vocab_size, d}, weight_kind::linear, &w.embed);
    add_top("head.weight", "lm_head.weight", {c.vocab_size, d}, weight_kind::linear, &w.head);
    add_top("norm.weight", "model.norm.weight", {d}, weight_kind::vector, &w.norm);
    add_top("hc_head_fn", "model.hc_head.hc_fn", {n, n * d}, weight_kind::vector, &w.hc_head.fn);
    add_top("hc_head_base", "model.hc_head.hc_base", {n}, weight_kind::vector, &w.hc_head.base);
    add_top("hc_head_scale", "model.hc_head.hc_scale", {1}, weight_kind::vector, &w.hc_head.scale);
    for (size_t i = 0; i < c.layers.size(); ++i) {
        const layer_config& lc = c.layers[i];
        auto& lw = w.layers[i];
        int64_t id = static_cast<int64_t>(i);
        layer_enumerator le{c, out, "", "", lc.is_mtp, id};
        if (lc.is_mtp) {
            le.up = fmt::format("mtp.{}.", id - c.num_hidden_layers);
        } else {
            le.up = fmt::format("layers.{}.", id);
            le.hf = fmt::format("model.layers.{}.", id);
        }
        le.hc("attn", "attn_hc", lw.hc_attn);
        le.hc("ffn", "ffn_hc", lw.hc_ffn);
        le.add("attn_norm.weight", "input_layernorm.weight", {d}, weight_kind::vector, &lw.attn_norm);
        le.add("ffn_norm.weight", "post_attention_layernorm.weight", {d}, weight_kind::vector, &lw.ffn_norm);
        le.attention(lc, lw.attn);
        le.moe(lc, lw.moe);
        if (lc.is_mtp) le.mtp_extras(lw.mtp);
    }
    return out;
}

}  // namespace tandem::model::detail
