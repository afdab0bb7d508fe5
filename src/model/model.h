// model/model.h — The DeepSeek-V4 model on the CPU backend: load a checkpoint, run forward passes.
//
// Owns: the validated config + weights (immutable after load), the CPU worker pool, and the
// forward pass (embedding → mHC blocks with sliding/CSA/HCA attention and hash/routed MoE →
// hc_head → norm → head). Callers (engine, tests) see only this header: they create one
// `sequence_state` per sequence, then call `forward` with batches of (new tokens, start
// position, state). The state holds everything the sequence needs to continue (window rows,
// compressed rows, indexer rows, compressor remainders); callers must not depend on its
// contents. Chunked prefill with any chunk size and token-by-token decode give bitwise the same
// logits as one full-sequence call, and a sequence's logits do not depend on the rest of the
// batch or on the thread count (design invariant 8).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"

namespace tandem::model {

struct sequence_state;  // per-sequence cache (model/sequence_state.h); opaque to callers

enum class numerics_mode {
    hf,        // matches HF transformers DeepseekV4ForCausalLM (fp32, no quantization simulation)
    official,  // DeepSeek reference: FP8 KV, FP4 indexer (Hadamard), FP8 activations (spec §6)
};

struct model_options {
    numerics_mode numerics = numerics_mode::hf;
    int threads = 0;  // CPU worker threads; 0 = all cores
};

// One sequence's slice of a batch.
struct forward_item {
    std::span<const int32_t> tokens;  // new token ids
    int64_t start_pos = 0;            // position of tokens[0]; must equal the state's length
    sequence_state* state = nullptr;
    bool all_logits = false;          // logits for every new token, else only the last one
};

struct forward_output {
    // Per item, row-major [rows, vocab]: rows = tokens.size() with all_logits, else 1.
    std::vector<std::vector<float>> logits;
};

class model_impl;

class model {
public:
    // Reads dir/config.json and the safetensors, validates every tensor, converts to compute form.
    static result<std::unique_ptr<model>> load(const std::string& dir, const model_options& opt = {});
    ~model();

    const model_config& config() const;
    std::unique_ptr<sequence_state, void (*)(sequence_state*)> new_sequence() const;
    // Tokens processed so far by a state.
    static int64_t sequence_length(const sequence_state& s);

    // Runs one batch. Errors: a token id outside the vocabulary, start_pos not matching the
    // state, an empty item.
    result<forward_output> forward(std::span<const forward_item> items);

private:
    explicit model(std::unique_ptr<model_impl> impl);
    std::unique_ptr<model_impl> impl_;
};

using sequence_handle = std::unique_ptr<sequence_state, void (*)(sequence_state*)>;

}  // namespace tandem::model
