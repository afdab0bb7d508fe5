// model/model_config.cpp — config.json → model_config (all three spellings) and back.
//
// Every field is looked up under a list of aliases, first match wins: the transformers-native /
// upstream-HF name first, then the official inference/config.json (ModelArgs) name. JSON null
// counts as absent (V3 leftovers such as "kv_lora_rank": null). Unknown keys are ignored.
// Structural dimensions are required; tunables with a published default (eps, hc_*, rope,
// scoring) fall back to the DeepseekV4Config defaults (dsv4-model.md §1.2).
#include "model/model_config.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>

namespace tandem::model {

const char* attention_type_name(attention_type t) {
    switch (t) {
        case attention_type::sliding: return "sliding_attention";
        case attention_type::csa: return "compressed_sparse_attention";
        case attention_type::hca: return "heavily_compressed_attention";
    }
    return "?";
}

const char* mlp_type_name(mlp_type t) { return t == mlp_type::hash_moe ? "hash_moe" : "moe"; }

int64_t model_config::count_layers(attention_type t, bool include_mtp) const {
    int64_t n = 0;
    for (const layer_config& l : layers) {
        if (l.attention == t && (include_mtp || !l.is_mtp)) ++n;
    }
    return n;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;
using names = std::initializer_list<std::string_view>;

// Typed, alias-aware access to one JSON object; every error names the key and the origin.
class json_fields {
public:
    json_fields(object obj, std::string_view origin, std::string prefix = "")
        : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

    // The first alias present with a non-null value.
    std::optional<std::pair<std::string_view, element>> find(names keys) const {
        for (std::string_view k : keys) {
            element e;
            if (obj_[k].get(e) == simdjson::SUCCESS && e.type() != element_type::NULL_VALUE) {
                return std::make_pair(k, e);
            }
        }
        return std::nullopt;
    }

    status error(std::string_view key, std::string_view what) const {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: key '{}{}': {}", origin_, prefix_, key, what));
    }
    status missing(names keys) const {
        return error(*keys.begin(), "missing required key");
    }

    status get_int(names keys, int64_t& out, bool required) const {
        auto f = find(keys);
        if (!f) return required ? missing(keys) : status::ok();
        return to_int(f->first, f->second, out);
    }
    status get_double(names keys, double& out, bool required) const {
        auto f = find(keys);
        if (!f) return required ? missing(keys) : status::ok();
        double v = 0;
        if (f->second.get_double().get(v) != simdjson::SUCCESS) {
            return error(f->first, "expected a number");
        }
        out = v;
        return status::ok();
    }
    status get_bool(names keys, bool& out) const {
        auto f = find(keys);
        if (!f) return status::ok();
        if (f->second.get_bool().get(out) != simdjson::SUCCESS) {
            return error(f->first, "expected true or false");
        }
        return status::ok();
    }
    status get_string(names keys, std::string& out, bool required) const {
        auto f = find(keys);
        if (!f) return required ? missing(keys) : status::ok();
        std::string_view v;
        if (f->second.get_string().get(v) != simdjson::SUCCESS) {
            return error(f->first, "expected a string");
        }
        out = std::string(v);
        return status::ok();
    }
    status to_int(std::string_view key, element e, int64_t& out) const {
        if (e.get_int64().get(out) == simdjson::SUCCESS) return status::ok();
        double d = 0;  // 4.0 is an integer too (some writers emit floats)
        if (e.get_double().get(d) == simdjson::SUCCESS && std::floor(d) == d &&
            std::fabs(d) < 9.0e18) {
            out = static_cast<int64_t>(d);
            return status::ok();
        }
        return error(key, "expected an integer");
    }
    std::optional<json_fields> sub_object(names keys) const {
        auto f = find(keys);
        object o;
        if (!f || f->second.get_object().get(o) != simdjson::SUCCESS) return std::nullopt;
        return json_fields(o, origin_, prefix_ + std::string(f->first) + ".");
    }
    std::string_view origin() const { return origin_; }

private:
    object obj_;
    std::string_view origin_;
    std::string prefix_;
};

status parse_dims(const json_fields& j, model_config& c) {
    TANDEM_RETURN_IF_ERROR(j.get_string({"model_type"}, c.model_type, false));
    if (c.model_type != "deepseek_v4") {
        return j.error("model_type", fmt::format("'{}' is not deepseek_v4", c.model_type));
    }
    TANDEM_RETURN_IF_ERROR(j.get_int({"vocab_size"}, c.vocab_size, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"hidden_size", "dim"}, c.hidden_size, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"num_hidden_layers", "n_layers"}, c.num_hidden_layers, true));
    c.num_nextn_predict_layers = 1;  // ModelArgs and DeepseekV4Config default
    TANDEM_RETURN_IF_ERROR(j.get_int({"num_nextn_predict_layers", "n_mtp_layers"},
                                     c.num_nextn_predict_layers, false));
    TANDEM_RETURN_IF_ERROR(
        j.get_int({"num_attention_heads", "n_heads"}, c.num_attention_heads, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"num_key_value_heads"}, c.num_key_value_heads, false));
    TANDEM_RETURN_IF_ERROR(j.get_int({"head_dim"}, c.head_dim, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"q_lora_rank"}, c.q_lora_rank, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"o_groups"}, c.o_groups, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"o_lora_rank"}, c.o_lora_rank, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"sliding_window", "window_size"}, c.sliding_window, false));
    c.max_position_embeddings = 1048576;
    TANDEM_RETURN_IF_ERROR(j.get_int({"max_position_embeddings", "max_seq_len"},
                                     c.max_position_embeddings, false));
    TANDEM_RETURN_IF_ERROR(j.get_int({"index_n_heads"}, c.index_n_heads, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"index_head_dim"}, c.index_head_dim, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"index_topk"}, c.index_topk, true));
    return status::ok();
}

status parse_moe(const json_fields& j, model_config& c) {
    TANDEM_RETURN_IF_ERROR(j.get_int({"n_routed_experts"}, c.n_routed_experts, true));
    TANDEM_RETURN_IF_ERROR(j.get_int({"n_shared_experts"}, c.n_shared_experts, false));
    TANDEM_RETURN_IF_ERROR(
        j.get_int({"num_experts_per_tok", "n_activated_experts"}, c.num_experts_per_tok, true));
    TANDEM_RETURN_IF_ERROR(
        j.get_int({"moe_intermediate_size", "moe_inter_dim"}, c.moe_intermediate_size, true));
    TANDEM_RETURN_IF_ERROR(j.get_string({"scoring_func", "score_func"}, c.scoring_func, false));
    if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "softmax" &&
        c.scoring_func != "sigmoid") {
        return j.error("scoring_func", fmt::format("unknown scoring function '{}'", c.scoring_func));
    }
    TANDEM_RETURN_IF_ERROR(j.get_bool({"norm_topk_prob"}, c.norm_topk_prob));
    TANDEM_RETURN_IF_ERROR(
        j.get_double({"routed_scaling_factor", "route_scale"}, c.routed_scaling_factor, false));
    TANDEM_RETURN_IF_ERROR(j.get_double({"swiglu_limit"}, c.swiglu_limit, false));
    TANDEM_RETURN_IF_ERROR(j.get_int({"hc_mult"}, c.hc_mult, false));
    TANDEM_RETURN_IF_ERROR(j.get_int({"hc_sinkhorn_iters"}, c.hc_sinkhorn_iters, false));
    TANDEM_RETURN_IF_ERROR(j.get_double({"hc_eps"}, c.hc_eps, false));
    TANDEM_RETURN_IF_ERROR(j.get_double({"rms_norm_eps", "norm_eps"}, c.rms_norm_eps, false));
    return status::ok();
}

status parse_tokens_and_dtypes(const json_fields& j, model_config& c) {
    TANDEM_RETURN_IF_ERROR(j.get_int({"bos_token_id"}, c.bos_token_id, false));
    if (auto f = j.find({"eos_token_id"})) {
        c.eos_token_ids.clear();
        simdjson::dom::array arr;
        if (f->second.get_array().get(arr) == simdjson::SUCCESS) {
            for (element e : arr) {
                int64_t v = 0;
                TANDEM_RETURN_IF_ERROR(j.to_int("eos_token_id", e, v));
                c.eos_token_ids.push_back(v);
            }
            if (c.eos_token_ids.empty()) return j.error("eos_token_id", "empty list");
        } else {
            int64_t v = 0;
            TANDEM_RETURN_IF_ERROR(j.to_int("eos_token_id", f->second, v));
            c.eos_token_ids.push_back(v);
        }
    }
    TANDEM_RETURN_IF_ERROR(j.get_bool({"tie_word_embeddings"}, c.tie_word_embeddings));
    TANDEM_RETURN_IF_ERROR(j.get_string({"expert_dtype"}, c.expert_dtype, false));
    if (!c.expert_dtype.empty() && c.expert_dtype != "fp4" && c.expert_dtype != "fp8" &&
        c.expert_dtype != "bf16") {
        return j.error("expert_dtype", fmt::format("unknown dtype '{}'", c.expert_dtype));
    }
    // "dtype" is the transformers >= 4.56 spelling of torch_dtype; in the official
    // inference/config.json it is the weight format ("fp8" | "bf16") instead.
    std::string dtype;
    TANDEM_RETURN_IF_ERROR(j.get_string({"torch_dtype", "dtype"}, dtype, false));
    bool official_fp8 = false;
    if (dtype == "fp8") {
        official_fp8 = true;
        dtype = "bfloat16";
    } else if (dtype == "bf16") {
        dtype = "bfloat16";
    }
    if (!dtype.empty()) c.torch_dtype = dtype;

    if (auto q = j.sub_object({"quantization_config"})) {
        quantization_config& qc = c.quantization;
        qc.present = true;
        TANDEM_RETURN_IF_ERROR(q->get_string({"quant_method"}, qc.quant_method, false));
        TANDEM_RETURN_IF_ERROR(q->get_string({"fmt"}, qc.fmt, false));
        TANDEM_RETURN_IF_ERROR(q->get_string({"scale_fmt"}, qc.scale_fmt, false));
        TANDEM_RETURN_IF_ERROR(q->get_string({"activation_scheme"}, qc.activation_scheme, false));
        if (auto f = q->find({"weight_block_size"})) {
            simdjson::dom::array arr;
            if (f->second.get_array().get(arr) != simdjson::SUCCESS || arr.size() != 2) {
                return q->error("weight_block_size", "expected [rows, cols]");
            }
            TANDEM_RETURN_IF_ERROR(q->to_int("weight_block_size", arr.at(0).value(), qc.block_rows));
            TANDEM_RETURN_IF_ERROR(q->to_int("weight_block_size", arr.at(1).value(), qc.block_cols));
            if (qc.block_rows <= 0 || qc.block_cols <= 0) {
                return q->error("weight_block_size", "block sizes must be positive");
            }
        }
    } else if (official_fp8) {
        // The official ModelArgs: block-128 FP8 weights with a scale format named at top level.
        c.quantization = {true, "fp8", "e4m3", "ue8m0", "dynamic", 128, 128};
        TANDEM_RETURN_IF_ERROR(j.get_string({"scale_fmt"}, c.quantization.scale_fmt, false));
    }
    return status::ok();
}


// --- Layer types --------------------------------------------------------------------------------
// Native `layer_types` wins; else legacy `compress_ratios` ({0, csa, hca} → type), whose entries
// past num_hidden_layers describe the MTP blocks. MTP blocks default to sliding (both published
// configs say ratio 0 there) and always route by score (their id is >= num_hash_layers).

status parse_compress_rates(const json_fields& j, model_config& c) {
    if (auto r = j.sub_object({"compress_rates"})) {
        TANDEM_RETURN_IF_ERROR(
            r->get_int({"compressed_sparse_attention"}, c.compress_rate_csa, false));
        TANDEM_RETURN_IF_ERROR(
            r->get_int({"heavily_compressed_attention"}, c.compress_rate_hca, false));
    }
    TANDEM_RETURN_IF_ERROR(j.get_int({"compress_rate_csa"}, c.compress_rate_csa, false));
    TANDEM_RETURN_IF_ERROR(j.get_int({"compress_rate_hca"}, c.compress_rate_hca, false));
    if (c.compress_rate_csa <= 0 || c.compress_rate_hca <= 0) {
        return j.error("compress_rates", "rates must be positive");
    }
    return status::ok();
}

status parse_attention_types(const json_fields& j, model_config& c) {
    const int64_t n = c.num_hidden_layers;
    c.layers.assign(static_cast<size_t>(n + c.num_nextn_predict_layers), layer_config{});
    for (int64_t i = n; i < c.num_layers_total(); ++i) c.layers[i].is_mtp = true;

    simdjson::dom::array arr;
    if (auto f = j.find({"layer_types"})) {
        if (f->second.get_array().get(arr) != simdjson::SUCCESS || int64_t(arr.size()) < n) {
            return j.error("layer_types", fmt::format("expected a list of {} layer types", n));
        }
        int64_t i = 0;
        for (element e : arr) {
            if (i >= n) break;  // HF truncates to num_hidden_layers
            std::string_view s;
            if (e.get_string().get(s) != simdjson::SUCCESS) {
                return j.error("layer_types", "expected strings");
            }
            if (s == "sliding_attention") c.layers[i].attention = attention_type::sliding;
            else if (s == "compressed_sparse_attention") c.layers[i].attention = attention_type::csa;
            else if (s == "heavily_compressed_attention") c.layers[i].attention = attention_type::hca;
            else return j.error("layer_types", fmt::format("unknown layer type '{}'", s));
            ++i;
        }
    } else if (auto g = j.find({"compress_ratios"})) {
        if (g->second.get_array().get(arr) != simdjson::SUCCESS || int64_t(arr.size()) < n) {
            return j.error("compress_ratios", fmt::format("expected a list of >= {} ratios", n));
        }
        int64_t i = 0;
        for (element e : arr) {
            if (i >= c.num_layers_total()) break;
            int64_t r = 0;
            TANDEM_RETURN_IF_ERROR(j.to_int("compress_ratios", e, r));
            if (r == 0) c.layers[i].attention = attention_type::sliding;
            else if (r == c.compress_rate_csa) c.layers[i].attention = attention_type::csa;
            else if (r == c.compress_rate_hca) c.layers[i].attention = attention_type::hca;
            else return j.error("compress_ratios", fmt::format("unsupported ratio {}", r));
            ++i;
        }
    } else {
        return j.error("layer_types", "missing required key (or legacy 'compress_ratios')");
    }
    for (layer_config& l : c.layers) {
        l.compress_ratio = l.attention == attention_type::csa   ? c.compress_rate_csa
                           : l.attention == attention_type::hca ? c.compress_rate_hca
                                                                : 0;
    }
    return status::ok();
}

status parse_mlp_types(const json_fields& j, model_config& c) {
    const int64_t n = c.num_hidden_layers;
    simdjson::dom::array arr;
    if (auto f = j.find({"mlp_layer_types"})) {
        if (f->second.get_array().get(arr) != simdjson::SUCCESS || int64_t(arr.size()) < n) {
            return j.error("mlp_layer_types", fmt::format("expected a list of {} mlp types", n));
        }
        int64_t i = 0;
        for (element e : arr) {
            if (i >= n) break;
            std::string_view s;
            if (e.get_string().get(s) != simdjson::SUCCESS) {
                return j.error("mlp_layer_types", "expected strings");
            }
            if (s == "hash_moe") c.layers[i].mlp = mlp_type::hash_moe;
            else if (s == "moe") c.layers[i].mlp = mlp_type::moe;
            else return j.error("mlp_layer_types", fmt::format("unknown mlp type '{}'", s));
            ++i;
        }
    } else {
        int64_t hash_layers = 3;
        TANDEM_RETURN_IF_ERROR(j.get_int({"num_hash_layers", "n_hash_layers"}, hash_layers, false));
        if (hash_layers < 0 || hash_layers > n) {
            return j.error("num_hash_layers", fmt::format("must be in [0, {}]", n));
        }
        for (int64_t i = 0; i < n; ++i) {
            c.layers[i].mlp = i < hash_layers ? mlp_type::hash_moe : mlp_type::moe;
        }
    }
    c.num_hash_layers = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (c.layers[i].mlp == mlp_type::hash_moe) ++c.num_hash_layers;
    }
    return status::ok();
}

// --- RoPE ---------------------------------------------------------------------------------------
// Native: rope_parameters {main: {...}, compress: {...}}. trl: compress_rope_parameters {...}.
// Upstream: rope_theta, compress_rope_theta, rope_scaling {type: yarn, ...}. Official:
// rope_theta, compress_rope_theta, rope_factor, original_seq_len, beta_fast, beta_slow.

status read_rope_object(const json_fields& r, rope_config& out) {
    TANDEM_RETURN_IF_ERROR(r.get_string({"rope_type", "type"}, out.type, false));
    if (out.type != "default" && out.type != "yarn") {
        return r.error("rope_type", fmt::format("unsupported rope type '{}'", out.type));
    }
    TANDEM_RETURN_IF_ERROR(r.get_double({"rope_theta", "base"}, out.theta, false));
    TANDEM_RETURN_IF_ERROR(r.get_double({"factor"}, out.factor, false));
    TANDEM_RETURN_IF_ERROR(r.get_int({"original_max_position_embeddings"},
                                     out.original_max_position_embeddings, false));
    TANDEM_RETURN_IF_ERROR(r.get_double({"beta_fast"}, out.beta_fast, false));
    TANDEM_RETURN_IF_ERROR(r.get_double({"beta_slow"}, out.beta_slow, false));
    TANDEM_RETURN_IF_ERROR(r.get_double({"attention_factor"}, out.attention_factor, false));
    TANDEM_RETURN_IF_ERROR(
        r.get_double({"partial_rotary_factor"}, out.partial_rotary_factor, false));
    return status::ok();
}

status parse_rope(const json_fields& j, model_config& c) {
    c.rope_main = rope_config{};
    c.rope_compress = rope_config{};
    c.rope_compress.theta = 160000.0;
    TANDEM_RETURN_IF_ERROR(j.get_double({"rope_theta"}, c.rope_main.theta, false));
    TANDEM_RETURN_IF_ERROR(j.get_double({"compress_rope_theta"}, c.rope_compress.theta, false));
    if (auto s = j.sub_object({"rope_scaling"})) {
        TANDEM_RETURN_IF_ERROR(read_rope_object(*s, c.rope_compress));
    } else if (j.find({"rope_factor", "original_seq_len"})) {
        rope_config& r = c.rope_compress;
        r.type = "yarn";
        TANDEM_RETURN_IF_ERROR(j.get_double({"rope_factor"}, r.factor, false));
        TANDEM_RETURN_IF_ERROR(
            j.get_int({"original_seq_len"}, r.original_max_position_embeddings, false));
        TANDEM_RETURN_IF_ERROR(j.get_double({"beta_fast"}, r.beta_fast, false));
        TANDEM_RETURN_IF_ERROR(j.get_double({"beta_slow"}, r.beta_slow, false));
        if (r.original_max_position_embeddings == 0) r.type = "default";  // official: yarn off
    }
    if (auto cp = j.sub_object({"compress_rope_parameters"})) {
        TANDEM_RETURN_IF_ERROR(read_rope_object(*cp, c.rope_compress));
    }
    if (auto rp = j.sub_object({"rope_parameters"})) {
        auto main = rp->sub_object({"main"});
        auto comp = rp->sub_object({"compress"});
        if (main) TANDEM_RETURN_IF_ERROR(read_rope_object(*main, c.rope_main));
        if (comp) TANDEM_RETURN_IF_ERROR(read_rope_object(*comp, c.rope_compress));
        if (!main && !comp) TANDEM_RETURN_IF_ERROR(read_rope_object(*rp, c.rope_main));
    }
    // YaRN magnitude scaling is disabled by design (official; HF forces attention_factor=1).
    c.rope_compress.attention_factor = 1.0;
    return status::ok();
}

// The rotated dims: qk_rope_head_dim (or ModelArgs rope_head_dim) if stated, else
// int(head_dim * partial_rotary_factor). Both stated and disagreeing is an error.
status parse_rope_dim(const json_fields& j, model_config& c) {
    double prf = -1;
    TANDEM_RETURN_IF_ERROR(j.get_double({"partial_rotary_factor"}, prf, false));
    if (prf < 0) {
        if (auto rp = j.sub_object({"rope_parameters"})) {
            if (auto main = rp->sub_object({"main"})) {
                TANDEM_RETURN_IF_ERROR(main->get_double({"partial_rotary_factor"}, prf, false));
            }
        }
    }
    int64_t stated = -1;
    TANDEM_RETURN_IF_ERROR(j.get_int({"qk_rope_head_dim", "rope_head_dim"}, stated, false));
    if (stated < 0) {
        if (prf < 0) prf = 0.125;
        stated = static_cast<int64_t>(static_cast<double>(c.head_dim) * prf);
    } else if (prf >= 0 && static_cast<int64_t>(static_cast<double>(c.head_dim) * prf) != stated) {
        return j.error("partial_rotary_factor",
                       fmt::format("{} * head_dim {} disagrees with qk_rope_head_dim {}", prf,
                                   c.head_dim, stated));
    }
    c.rope_head_dim = stated;
    c.nope_head_dim = c.head_dim - stated;
    const double exact = static_cast<double>(stated) / static_cast<double>(c.head_dim);
    c.rope_main.partial_rotary_factor = exact;
    c.rope_compress.partial_rotary_factor = exact;
    return status::ok();
}

// --- Validation ---------------------------------------------------------------------------------

status validate(const json_fields& j, const model_config& c) {
    struct positive { const char* key; int64_t v; };
    for (positive p : {positive{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                       {"num_hidden_layers", c.num_hidden_layers},
                       {"num_attention_heads", c.num_attention_heads}, {"head_dim", c.head_dim},
                       {"q_lora_rank", c.q_lora_rank}, {"o_groups", c.o_groups},
                       {"o_lora_rank", c.o_lora_rank}, {"sliding_window", c.sliding_window},
                       {"index_n_heads", c.index_n_heads}, {"index_head_dim", c.index_head_dim},
                       {"index_topk", c.index_topk}, {"n_routed_experts", c.n_routed_experts},
                       {"num_experts_per_tok", c.num_experts_per_tok},
                       {"moe_intermediate_size", c.moe_intermediate_size},
                       {"hc_mult", c.hc_mult}, {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
                       {"max_position_embeddings", c.max_position_embeddings}}) {
        if (p.v <= 0) return j.error(p.key, fmt::format("must be positive, got {}", p.v));
    }
    if (c.num_nextn_predict_layers < 0) return j.error("num_nextn_predict_layers", "negative");
    if (c.n_shared_experts < 0) return j.error("n_shared_experts", "negative");
    if (c.num_key_value_heads != 1) {
        return j.error("num_key_value_heads", "DeepSeek-V4 has one shared K=V head");
    }
    if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 != 0 || c.rope_head_dim >= c.head_dim) {
        return j.error("qk_rope_head_dim",
                       fmt::format("rope dim {} must be even and in (0, head_dim)", c.rope_head_dim));
    }
    if (c.rope_head_dim >= c.index_head_dim) {
        return j.error("index_head_dim", "must exceed the rope dim (its tail is rotated)");
    }
    if ((c.num_attention_heads * c.head_dim) % c.o_groups != 0) {
        return j.error("o_groups", "must divide num_attention_heads * head_dim");
    }
    if (c.num_experts_per_tok > c.n_routed_experts) {
        return j.error("num_experts_per_tok", "exceeds n_routed_experts");
    }
    if (c.compress_rate_csa == c.compress_rate_hca) {
        return j.error("compress_rates", "CSA and HCA rates must differ");
    }
    if (c.rms_norm_eps <= 0 || c.hc_eps <= 0) return j.error("rms_norm_eps", "must be positive");
    return status::ok();
}

}  // namespace

result<model_config> parse_model_config(std::string_view json, std::string_view origin) {
    simdjson::dom::parser parser;
    simdjson::padded_string text(json);
    element doc;
    if (auto err = parser.parse(text).get(doc); err != simdjson::SUCCESS) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: invalid JSON: {}", origin, simdjson::error_message(err)));
    }
    object obj;
    if (doc.get_object().get(obj) != simdjson::SUCCESS) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: top level is not a JSON object", origin));
    }
    json_fields j(obj, origin);
    model_config c;
    TANDEM_RETURN_IF_ERROR(parse_dims(j, c));
    TANDEM_RETURN_IF_ERROR(parse_moe(j, c));
    TANDEM_RETURN_IF_ERROR(parse_tokens_and_dtypes(j, c));
    TANDEM_RETURN_IF_ERROR(parse_compress_rates(j, c));
    if (c.num_hidden_layers <= 0 || c.num_hidden_layers > 4096) {
        return j.error("num_hidden_layers", "must be in [1, 4096]");
    }
    if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers > 16) {
        return j.error("num_nextn_predict_layers", "must be in [0, 16]");
    }
    TANDEM_RETURN_IF_ERROR(parse_attention_types(j, c));
    TANDEM_RETURN_IF_ERROR(parse_mlp_types(j, c));
    TANDEM_RETURN_IF_ERROR(parse_rope(j, c));
    TANDEM_RETURN_IF_ERROR(parse_rope_dim(j, c));
    TANDEM_RETURN_IF_ERROR(validate(j, c));
    return c;
}

result<model_config> load_model_config(const std::string& path_to_config_json) {
    std::ifstream in(path_to_config_json, std::ios::binary);
    if (!in) {
        return make_error(error_code::not_found,
                          fmt::format("{}: cannot open model config", path_to_config_json));
    }
    std::ostringstream buf;
    buf << in.rdbuf();
    if (in.bad()) {
        return make_error(error_code::io_error, fmt::format("{}: read failed", path_to_config_json));
    }
    return parse_model_config(buf.str(), path_to_config_json);
}

}  // namespace tandem::model
