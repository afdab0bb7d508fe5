// model/weights.h — DeepSeek-V4 weights, loaded and validated from a checkpoint and computed on in
// the form the checkpoint stores them.
//
// Owns: the list of tensors a model_config requires (names, shapes, accepted dtypes), resolving
// them in either naming scheme (upstream `layers.0.attn.wq_a.weight`, optionally `model.`-
// prefixed, or transformers-internal `model.layers.0.self_attn.q_a_proj.weight` with fused
// experts; dsv4-model.md §4.3) and validating: every missing, unexpected, mis-shaped or wrongly
// typed tensor is listed in ONE error before anything is computed.
//
// Matrices (linears, experts, embedding, head) stay where they are: views into the checkpoint's
// bytes in memory (copied into huge pages or mapped: model/file_bytes.h) in their stored form
// (F32, BF16, F16, F8_E4M3 + E8M0/F32 block scales, packed FP4 + E8M0 per-32 scales), decoded in
// registers by the kernels (cpu/weight_matrix.h). Decoding is exact, so numerics "hf" computes
// with exactly the fp32 values transformers dequantizes to.
// Only the small vectors (norms, mHC, biases, ape, sinks) and tid2eid are converted, to fp32 /
// int32 copies. Layer ids follow model_config: [0, num_hidden_layers) main blocks, then MTP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu/weight_matrix.h"
#include "model/model_config.h"

namespace tandem::model {

class checkpoint;

struct tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;  // vectors (norms, mHC, ape, sinks, biases): fp32 copies
    cpu::weight_matrix mat;   // matrices: the checkpoint's own bytes, in place
    // The checkpoint stored it FP8/FP4: numerics "official" quantizes the activations entering
    // it to FP8 (except wo_a, which the official runtime dequantizes to bf16).
    bool act_quant = false;
    const float* ptr() const { return data.data(); }
    bool empty() const { return data.empty() && mat.data == nullptr; }
};

struct hc_weights {  // one mHC site: fn [(2+n)·n, n·d], base, scale [3]  (head: [n, n·d], [n], [1])
    tensor fn, base, scale;
};

struct compressor_weights {
    tensor wkv, wgate;  // [c·D', d]
    tensor ape;         // [m, c·D']
    tensor norm;        // [D']
};

struct attention_weights {
    tensor wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, sink;
    bool has_compressor = false, has_indexer = false;
    compressor_weights compressor;
    tensor idx_wq_b, idx_weights_proj;  // CSA only
    compressor_weights idx_compressor;  // CSA only
};

struct expert_weights {
    tensor w1, w2, w3;  // gate [I, d], down [d, I], up [I, d]
};

struct moe_weights {
    tensor gate;                   // [E, d]
    tensor bias;                   // [E] (non-hash layers)
    std::vector<int32_t> tid2eid;  // [vocab, k] (hash layers)
    std::vector<expert_weights> experts;
    expert_weights shared;
};

struct mtp_weights {  // extra tensors of an MTP block
    tensor e_proj, h_proj, enorm, hnorm, norm;
    hc_weights hc_head;
};

struct layer_weights {
    hc_weights hc_attn, hc_ffn;
    tensor attn_norm, ffn_norm;
    attention_weights attn;
    moe_weights moe;
    mtp_weights mtp;  // only for MTP layers
};

// Where the weight bytes live, for the startup log and the memory budget.
struct weight_memory {
    int64_t checkpoint_bytes = 0;  // every tensor of the checkpoint files
    int64_t in_place_bytes[5] = {};  // matrices used from the mapping, by cpu::weight_form
    int64_t scale_bytes = 0;       // their FP8/FP4 scales, also in place
    int64_t converted_bytes = 0;   // fp32/int32 copies (vectors, tid2eid)
    // Where "in place" is: the checkpoint files copied into memory (model.weight_pages = huge;
    // copied_bytes of them, huge_page_bytes backed by 2 MiB pages when loaded) or mapped.
    int64_t copied_bytes = 0;
    int64_t huge_page_bytes = 0;
    int64_t amx_tile_bytes = 0;  // matrices multiplied on AMX tiles (backend.cpu_matmul = "amx")
    int64_t in_place_total() const;
    std::string describe() const;
};

struct model_weights {
    tensor embed, head, norm;
    hc_weights hc_head;
    std::vector<layer_weights> layers;  // cfg.layers.size() entries (MTP included)
    weight_memory memory;
    std::shared_ptr<const checkpoint> storage;  // keeps the mapping the matrices point into
};

// Progress callback: (bytes converted so far, total bytes).
using load_progress = std::function<void(int64_t, int64_t)>;

// Loads and validates. Errors list every problem (missing / unexpected / shape / dtype).
// amx_tiles: mark every matrix cpu::amx_fits() accepts for the AMX path (cpu/amx.h).
result<model_weights> load_weights(const model_config& cfg, const checkpoint& ck,
                                   const load_progress& progress = {}, bool amx_tiles = false);

// The upstream (official) tensor names and shapes a config needs, for make-model and tests.
struct weight_entry {
    std::string name;             // upstream name, no prefix
    std::vector<int64_t> shape;   // logical [out, in] shape
};
std::vector<weight_entry> expected_weights(const model_config& cfg);

}  // namespace tandem::model
