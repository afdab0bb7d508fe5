// cuda/host/device_weights.h — The model's weights resident in a device_runtime space, as stored.
//
// Matrices keep the checkpoint's stored form (FP8 e4m3 + UE8M0, FP4 packed, BF16, f32 — never
// expanded), uploaded byte for byte with their scales; the small fp32 vectors (norms, mHC, ape,
// sinks, biases) and tid2eid are uploaded as the CPU loader converted them. Views point into
// buffers this struct owns; it mirrors model/weights.h field for field so the device forward
// reads like the CPU one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda/host/device_runtime.h"
#include "model/weights.h"

namespace tandem::cuda {

struct dev_matrix {
    kmath::weight_view view;  // data / scales in the device space
    bool act_quant = false;   // numerics "official": FP8 QDQ of the activations entering it
};
struct dev_vector {
    const float* p = nullptr;
    int64_t n = 0;
};
struct dev_hc {
    dev_vector fn, base, scale;
};
struct dev_compressor {
    dev_matrix wkv, wgate;
    dev_vector ape, norm;
};
struct dev_attention {
    dev_matrix wq_a, wq_b, wkv, wo_a, wo_b, idx_wq_b, idx_weights_proj;
    dev_vector q_norm, kv_norm, sink;
    bool has_compressor = false, has_indexer = false;
    dev_compressor compressor, idx_compressor;
};
struct dev_expert {
    dev_matrix w1, w2, w3;
};
struct dev_moe {
    dev_matrix gate;
    dev_vector bias;                  // empty on hash layers
    const int32_t* tid2eid = nullptr; // [vocab, k] on hash layers, else null
    std::vector<dev_expert> experts;
    dev_expert shared;
};
struct dev_layer {
    dev_hc hc_attn, hc_ffn;
    dev_vector attn_norm, ffn_norm;
    dev_attention attn;
    dev_moe moe;
};

struct device_weights {
    dev_matrix embed, head;
    dev_vector norm;
    dev_hc hc_head;
    std::vector<dev_layer> layers;  // the layers the forward runs (MTP blocks are not uploaded)
    int64_t bytes = 0;              // device bytes the upload took
    std::vector<device_buffer> owned;
};

// Uploads the first `layers` layers' weights (plus embed, head, norms) into `ops`' space.
result<device_weights> upload_weights(device_runtime& ops, const model::model_weights& w, int64_t layers);

// Weights uploaded once and read by every device forward of this process over the same checkpoint
// (pd with role both: the prefill and the decode engine). Why shared: two engines on one device
// would otherwise hold the model twice in device memory, which the cache pool needs. The runtime
// instance that allocated the buffers is held with them (declared first: destroyed last), so the
// weights may outlive the executor that uploaded them; every instance of one process addresses
// the same space (GPU 0's context, or the host emulation), so a forward on another instance reads
// them as its own. Read-only once built: forwards on two threads read them at once.
struct resident_weights {
    std::shared_ptr<device_runtime> ops;
    device_weights w;
    std::string model_dir;  // the checkpoint they came from
};

result<std::shared_ptr<const resident_weights>> upload_resident(std::shared_ptr<device_runtime> ops,
                                                               const model::model_weights& w, int64_t layers,
                                                               std::string model_dir);

}  // namespace tandem::cuda
