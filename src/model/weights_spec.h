// model/weights_spec.h — (internal to model/) the tensor list of a DeepSeek-V4 config.
//
// One enumeration drives both the loader (weights.cpp) and the checkpoint writer (make_model.cpp),
// so the two can never disagree about names or shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/weights.h"

namespace tandem::model::detail {

enum class weight_kind : uint8_t {
    vector,    // float tensor of any rank (norm, hc, ape, sink, bias); F32/BF16/F16
    linear,    // [out, in] matrix; float, or F8_E4M3 + block scale
    expert,    // routed-expert matrix; float, F8_E4M3 + block scale, or packed FP4 (I8) + E8M0/32
    index,     // integer table (tid2eid): I64/I32
};

struct weight_slot {
    std::string name;      // upstream name ("layers.3.attn.wq_a.weight", "mtp.0.e_proj.weight")
    std::string hf_name;   // transformers-internal name ("" when HF has none: MTP, experts)
    std::vector<int64_t> shape;
    weight_kind kind = weight_kind::vector;
    tensor* target = nullptr;                 // float destination (null for index)
    std::vector<int32_t>* index_target = nullptr;
    bool mtp = false;
    int64_t layer = -1, expert = -1;          // for routed experts (fused HF lookup)
    int which = 0;                            // expert: 1 = w1, 2 = w2, 3 = w3
};

// Enumerates every tensor `cfg` needs; targets point into `w` (which is resized here).
std::vector<weight_slot> enumerate_weights(const model_config& cfg, model_weights& w);

}  // namespace tandem::model::detail
