// model/model_config_writer.cpp — model_config → transformers-native config.json.
//
// Writes what DeepseekV4Config.save_pretrained would (layer_types, mlp_layer_types,
// compress_rates, rope_parameters {main, compress}, partial_rotary_factor) plus qk_rope_head_dim
// and num_hash_layers, so both our parser and older readers find the shape. MTP layers are not
// listed (they are always sliding in the published configs; num_nextn_predict_layers counts them).
// Doubles are printed shortest-round-trip ({} in fmt), so parse(write(c)) == c exactly.
#include <fmt/format.h>

#include <string>

#include "model/model_config.h"

namespace tandem::model {

namespace {

std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (static_cast<unsigned char>(ch) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(ch));
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

// A double that always reads back as a JSON number (fmt may print 1e-06, which is valid JSON;
// an integral value like 10000 is printed as 10000.0 to keep it a float for Python readers).
std::string number(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

std::string rope_object(const rope_config& r, const char* indent) {
    std::string s = fmt::format("{{\n{0}  \"rope_type\": {1},\n{0}  \"rope_theta\": {2},\n"
                                "{0}  \"partial_rotary_factor\": {3}",
                                indent, quoted(r.type), number(r.theta),
                                number(r.partial_rotary_factor));
    if (r.type == "yarn") {
        s += fmt::format(",\n{0}  \"factor\": {1},\n{0}  \"original_max_position_embeddings\": {2},"
                         "\n{0}  \"beta_fast\": {3},\n{0}  \"beta_slow\": {4},\n"
                         "{0}  \"attention_factor\": {5}",
                         indent, number(r.factor), r.original_max_position_embeddings,
                         number(r.beta_fast), number(r.beta_slow), number(r.attention_factor));
    }
    return s + fmt::format("\n{}}}", indent);
}

std::string layer_lists(const model_config& c) {
    std::string attn, mlp;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const layer_config& l = c.layers[static_cast<size_t>(i)];
        attn += fmt::format("{}\n    {}", i ? "," : "", quoted(attention_type_name(l.attention)));
        mlp += fmt::format("{}\n    {}", i ? "," : "", quoted(mlp_type_name(l.mlp)));
    }
    return fmt::format("  \"layer_types\": [{}\n  ],\n  \"mlp_layer_types\": [{}\n  ],\n", attn, mlp);
}

std::string quantization_object(const quantization_config& q) {
    return fmt::format(
        "  \"quantization_config\": {{\n    \"quant_method\": {},\n    \"fmt\": {},\n"
        "    \"scale_fmt\": {},\n    \"activation_scheme\": {},\n"
        "    \"weight_block_size\": [{}, {}]\n  }},\n",
        quoted(q.quant_method), quoted(q.fmt), quoted(q.scale_fmt), quoted(q.activation_scheme),
        q.block_rows, q.block_cols);
}

}  // namespace

std::string to_hf_config_json(const model_config& c) {
    std::string s = "{\n  \"architectures\": [\"DeepseekV4ForCausalLM\"],\n";
    s += fmt::format("  \"model_type\": {},\n  \"dtype\": {},\n", quoted(c.model_type),
                     quoted(c.torch_dtype));
    if (!c.expert_dtype.empty()) s += fmt::format("  \"expert_dtype\": {},\n", quoted(c.expert_dtype));
    s += fmt::format(
        "  \"vocab_size\": {},\n  \"hidden_size\": {},\n  \"num_hidden_layers\": {},\n"
        "  \"num_nextn_predict_layers\": {},\n  \"num_attention_heads\": {},\n"
        "  \"num_key_value_heads\": {},\n  \"head_dim\": {},\n  \"qk_rope_head_dim\": {},\n"
        "  \"partial_rotary_factor\": {},\n  \"q_lora_rank\": {},\n  \"o_groups\": {},\n"
        "  \"o_lora_rank\": {},\n  \"sliding_window\": {},\n  \"max_position_embeddings\": {},\n",
        c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_nextn_predict_layers,
        c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rope_head_dim,
        number(c.rope_main.partial_rotary_factor), c.q_lora_rank, c.o_groups, c.o_lora_rank,
        c.sliding_window, c.max_position_embeddings);
    s += layer_lists(c);
    s += fmt::format(
        "  \"compress_rates\": {{\n    \"compressed_sparse_attention\": {},\n"
        "    \"heavily_compressed_attention\": {}\n  }},\n",
        c.compress_rate_csa, c.compress_rate_hca);
    s += fmt::format("  \"rope_theta\": {},\n  \"compress_rope_theta\": {},\n",
                     number(c.rope_main.theta), number(c.rope_compress.theta));
    s += fmt::format("  \"rope_parameters\": {{\n    \"main\": {},\n    \"compress\": {}\n  }},\n",
                     rope_object(c.rope_main, "    "), rope_object(c.rope_compress, "    "));
    s += fmt::format(
        "  \"index_n_heads\": {},\n  \"index_head_dim\": {},\n  \"index_topk\": {},\n"
        "  \"n_routed_experts\": {},\n  \"n_shared_experts\": {},\n  \"num_experts_per_tok\": {},\n"
        "  \"moe_intermediate_size\": {},\n  \"num_hash_layers\": {},\n  \"scoring_func\": {},\n"
        "  \"norm_topk_prob\": {},\n  \"routed_scaling_factor\": {},\n  \"swiglu_limit\": {},\n",
        c.index_n_heads, c.index_head_dim, c.index_topk, c.n_routed_experts, c.n_shared_experts,
        c.num_experts_per_tok, c.moe_intermediate_size, c.num_hash_layers, quoted(c.scoring_func),
        c.norm_topk_prob, number(c.routed_scaling_factor), number(c.swiglu_limit));
    s += fmt::format(
        "  \"hc_mult\": {},\n  \"hc_sinkhorn_iters\": {},\n  \"hc_eps\": {},\n"
        "  \"rms_norm_eps\": {},\n",
        c.hc_mult, c.hc_sinkhorn_iters, number(c.hc_eps), number(c.rms_norm_eps));
    if (c.quantization.present) s += quantization_object(c.quantization);
    std::string eos;
    for (size_t i = 0; i < c.eos_token_ids.size(); ++i) {
        eos += fmt::format("{}{}", i ? ", " : "", c.eos_token_ids[i]);
    }
    if (c.eos_token_ids.size() != 1) eos = "[" + eos + "]";
    s += fmt::format(
        "  \"bos_token_id\": {},\n  \"eos_token_id\": {},\n  \"tie_word_embeddings\": {},\n"
        "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
        "  \"initializer_range\": 0.02,\n  \"use_cache\": true\n}}\n",
        c.bos_token_id, eos, c.tie_word_embeddings);
    return s;
}

}  // namespace tandem::model
