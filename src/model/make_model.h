// model/make_model.h — (model/ internal API, used by make-model and tests) generated checkpoints.
//
// Everything is a pure function of (preset, seed): the same call writes byte-identical files,
// so tests regenerate the golden checkpoints instead of storing them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"

namespace tandem::model {

// "tiny" | "tiny-bf16" | "tiny-fp8" | "small" | "flash-shape" | "flash-slice" | "flash-layer"; error names the
// valid presets.
result<model_config> preset_config(const std::string& preset);
std::vector<std::string> preset_names();

enum class tensor_naming { upstream, transformers };

struct make_model_options {
    uint64_t seed = 0;
    std::string tokenizer_dir;  // empty: no tokenizer files
    tensor_naming naming = tensor_naming::upstream;
    bool quantize = false;      // F8_E4M3 + E8M0 block linears, FP4 routed experts (flash-shape)
    bool bf16 = false;          // BF16 storage for float tensors (else F32)
};

// Writes config.json, generation_config.json, model.safetensors (+ tokenizer files) into dir.
status write_random_checkpoint(const model_config& cfg, const std::string& dir, const make_model_options& opt);

}  // namespace tandem::model
