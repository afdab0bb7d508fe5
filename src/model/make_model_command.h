// model/make_model_command.h — `tandem make-model`: writes a deterministic random-weight
// DeepSeek-V4 checkpoint in HF format (transformers-native config.json, model.safetensors,
// generation_config.json, tokenizer files copied from tokenizer_dir).
//
// Presets (model/make_model.h lists their shapes): tiny (every layer type and both MoE kinds at
// sizes where short prompts exercise window, CSA/HCA compression and top-k selection; fp32;
// tiny-bf16 and tiny-fp8 store the same shapes as BF16, or as FP8 + FP4 like the real checkpoint),
// small (a benchmarking size of a few hundred MB; bf16), flash-shape (Flash's ratios and head
// geometry at a small width; FP8 block weights and FP4 experts like the real checkpoint),
// flash-slice (Flash's true widths, one CSA + one HCA layer) and flash-layer (one CSA layer at
// Flash's widths, vocabulary cut to 16384: the CUDA tier-5 check's full-width layer).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::model {

// Returns the process exit code: 0 ok, 2 bad arguments, 1 I/O failure. Human output on stdout,
// errors on stderr. An empty tokenizer_dir writes no tokenizer files (and says so).
int run_make_model_command(const std::string& preset, const std::string& out_dir, uint64_t seed,
                           const std::string& tokenizer_dir);

}  // namespace tandem::model
