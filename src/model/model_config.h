// model/model_config.h — The DeepSeek-V4 model shape, parsed once from a checkpoint's config.json.
//
// Owns: reading config.json in every form we meet (the upstream/"legacy" HF form with
// `compress_ratios`/`rope_scaling`/`qk_rope_head_dim`, the transformers-native form with
// `layer_types`/`mlp_layer_types`/`compress_rates`/`rope_parameters`/`partial_rotary_factor`, and
// the official `inference/config.json` ModelArgs names), validating it, and writing the
// transformers-native form back (used by `tandem make-model`).
//
// After parsing, a model_config is immutable: every other module (cache layout, forward pass,
// weight loader) reads its shape from here and never from the json again (style habit 9).
// Callers must not depend on which json form the config came from.
//
// Layer ids are global: [0, num_hidden_layers) are the main decoder blocks, followed by the
// num_nextn_predict_layers MTP blocks. `layers` holds all of them so tables indexed by layer id
// (cache layout, weights) can be sized by layers.size() (prefix-cache spec §5.7).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tandem::model {

enum class attention_type : uint8_t {
    sliding,  // window only ("sliding_attention", compress ratio 0)
    csa,      // compressed sparse attention + lightning indexer ("compressed_sparse_attention")
    hca,      // heavily compressed attention, dense over compressed rows
};

enum class mlp_type : uint8_t {
    hash_moe,  // experts chosen by tid2eid[token] (first num_hash_layers layers)
    moe,       // experts chosen by router score + bias
};

const char* attention_type_name(attention_type t);  // the transformers-native spelling
const char* mlp_type_name(mlp_type t);

struct layer_config {
    attention_type attention = attention_type::sliding;
    int64_t compress_ratio = 0;  // 0 sliding, compress_rates[csa] (4), compress_rates[hca] (128)
    mlp_type mlp = mlp_type::moe;
    bool is_mtp = false;  // an MTP block (id >= num_hidden_layers)

    bool operator==(const layer_config&) const = default;
};

// RoPE parameters of one table. `main` serves sliding layers, `compress` serves CSA/HCA layers
// (dsv4-model.md §2.4). type "default" ignores the yarn fields.
struct rope_config {
    std::string type = "default";  // "default" | "yarn"
    double theta = 10000.0;
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    double attention_factor = 1.0;  // 1.0 disables YaRN magnitude scaling (matches official)
    double partial_rotary_factor = 0.125;

    bool operator==(const rope_config&) const = default;
};

// Block-FP8 weight quantization as stated by `quantization_config` (absent = unquantized).
struct quantization_config {
    bool present = false;
    std::string quant_method;       // "fp8"
    std::string fmt;                // "e4m3"
    std::string scale_fmt;          // "ue8m0"
    std::string activation_scheme;  // "dynamic"
    int64_t block_rows = 0;         // weight_block_size[0] (128)
    int64_t block_cols = 0;         // weight_block_size[1] (128)

    bool operator==(const quantization_config&) const = default;
};

struct model_config {
    std::string model_type = "deepseek_v4";
    std::string torch_dtype = "bfloat16";  // "torch_dtype" or "dtype"
    std::string expert_dtype;              // "fp4" | "fp8" | "" (not stated: same as other weights)

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;        // main blocks, MTP excluded
    int64_t num_nextn_predict_layers = 0; // MTP blocks
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 1;      // always 1 in V4 (K = V, one shared head)
    int64_t head_dim = 0;                 // D (512)
    int64_t rope_head_dim = 0;            // R: rotated trailing dims of each head (64)
    int64_t nope_head_dim = 0;            // D - R (448)
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;
    int64_t o_lora_rank = 0;
    int64_t sliding_window = 128;
    int64_t max_position_embeddings = 0;

    int64_t compress_rate_csa = 4;
    int64_t compress_rate_hca = 128;
    std::vector<layer_config> layers;  // num_hidden_layers + num_nextn_predict_layers entries

    rope_config rope_main;
    rope_config rope_compress;

    int64_t index_n_heads = 0;
    int64_t index_head_dim = 0;
    int64_t index_topk = 0;

    int64_t n_routed_experts = 0;
    int64_t n_shared_experts = 1;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    int64_t num_hash_layers = 0;  // derived from mlp types when not stated
    std::string scoring_func = "sqrtsoftplus";  // "sqrtsoftplus" | "softmax" | "sigmoid"
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.5;
    double swiglu_limit = 10.0;

    int64_t hc_mult = 4;
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    double rms_norm_eps = 1e-6;

    quantization_config quantization;

    int64_t bos_token_id = 0;
    std::vector<int64_t> eos_token_ids = {1};
    bool tie_word_embeddings = false;

    int64_t num_layers_total() const { return static_cast<int64_t>(layers.size()); }
    int64_t count_layers(attention_type t, bool include_mtp) const;
    const rope_config& rope_for(attention_type t) const {
        return t == attention_type::sliding ? rope_main : rope_compress;
    }

    bool operator==(const model_config&) const = default;
};

// Parses config.json text. `origin` (a path or a label) is named in every error message.
result<model_config> parse_model_config(std::string_view json, std::string_view origin);

// Reads and parses a config.json file.
result<model_config> load_model_config(const std::string& path_to_config_json);

// Writes the transformers-native config.json form. parse_model_config(to_hf_config_json(c))
// gives back c.
std::string to_hf_config_json(const model_config& cfg);

}  // namespace tandem::model
