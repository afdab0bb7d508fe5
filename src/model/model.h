// model/model.h — The DeepSeek-V4 model on the CPU backend: load a checkpoint, run forward passes.
//
// Owns: the validated config + weights (immutable after load), the CPU worker pool, and the
// forward pass (embedding → mHC blocks with sliding/CSA/HCA attention and hash/routed MoE →
// hc_head → norm → head). Callers (engine, tests) see only this header. All per-sequence state
// lives in the cache pool (cache/page_pool.h) in the configured dtypes: window rings, compressed
// KV rows, index-K rows and compressor rings; the model reads and writes them through the pool
// and keeps nothing per sequence itself.
//
// Caller contract for forward(pool, items), per item: `slot` is a current sequence slot of
// `pool` (whose layout was made from this model's config); the slot's state was reset
// (pool.reset_sequence_state) before its first tokens; pool.ensure_capacity(slot, start_pos +
// tokens.size()) succeeded; start_pos is the number of tokens the slot already holds. The pool
// must not be mutated by others during the call (lockstep, design invariant 6).
//
// Chunked prefill with any chunk size and token-by-token decode give bitwise the same logits
// as one full-sequence call with every storage dtype (each row is rounded to its storage format
// before anything reads it, in-chunk rows included), and a sequence's logits do not depend on
// the rest of the batch or on the thread count (design invariant 8). One forward call at a time
// per model (it drives the model's worker pool); the MTP block's weights load but the forward
// pass does not run it yet (speculative decoding comes later).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "core/status.h"
#include "model/file_bytes.h"
#include "model/model_config.h"

namespace tandem::model {

enum class numerics_mode {
    hf,        // matches HF transformers DeepseekV4ForCausalLM (fp32, no quantization simulation)
    official,  // DeepSeek reference: FP8 KV, FP4 indexer (Hadamard), FP8 activations (spec §6)
};

struct model_options {
    numerics_mode numerics = numerics_mode::hf;
    int threads = 0;  // CPU worker threads; 0 = all cores
    // How the checkpoint's bytes are held: copied into huge pages, or mapped (model/file_bytes.h).
    weight_pages pages = weight_pages::huge;
    // BF16, FP8 and FP4 matrices multiplied on AMX tiles (cpu/amx.h, backend.cpu_matmul = "amx"): batch-invariant
    // but not bitwise the exact kernels. load() refuses it where the CPU cannot run the tiles.
    bool amx_matmul = false;
};

// From config.model.numerics ("hf" | "official"), config.backend.threads,
// config.model.weight_pages ("huge" | "mapped") and config.backend.cpu_matmul ("exact" | "amx");
// errors name the key.
result<model_options> model_options_from(const std::string& numerics, int64_t threads,
                                         const std::string& pages = "huge", const std::string& cpu_matmul = "exact");

// What a model's outputs depend on besides its weights: model.numerics, plus "+amx" when
// backend.cpu_matmul = "amx" (whose bits differ from the exact kernels'). pd's model fingerprint
// and the prefix cache's key hash it, so state computed one way never meets the other.
std::string numerics_identity(const std::string& numerics, const std::string& cpu_matmul);

// Which of an item's new tokens the head computes logits for.
enum class logit_rows : uint8_t {
    none,  // no row: a prefill chunk short of the prompt's end
    last,  // the last new token's: the next token is sampled from it
    all,   // every new token's (prompt logprobs)
};

// One sequence's slice of a batch.
struct forward_item {
    std::span<const int32_t> tokens;  // new token ids
    int64_t start_pos = 0;            // position of tokens[0] = tokens the slot already holds
    cache::slot_ref slot;
    logit_rows logits = logit_rows::last;
};

// Rows of logits the item gets: 0, 1 or tokens.size().
int64_t logit_row_count(const forward_item& it);

struct forward_output {
    // Per item, row-major [rows, vocab], rows = logit_row_count(item).
    std::vector<std::vector<float>> logits;
};

class model_impl;
struct weight_memory;

class model {
public:
    // Reads dir/config.json and the safetensors, validates every tensor, converts to compute form.
    static result<std::unique_ptr<model>> load(const std::string& dir, const model_options& opt = {});
    ~model();

    // Another model over these same weights — read-only and shared, not a second copy of the
    // checkpoint — with its own worker pool and step buffers, and the same options: pd with role
    // both runs its prefill and decode engines in one process, each forwarding on its own thread.
    std::unique_ptr<model> sharing_weights() const;

    const model_config& config() const;
    // Where the weights live (in place in the checkpoint's bytes vs converted copies).
    const weight_memory& memory() const;

    // Runs one batch (see the caller contract above). Errors: a token id outside the vocabulary,
    // an empty item, a stale slot, missing page capacity, a pool laid out for another model.
    result<forward_output> forward(cache::page_pool& pool, std::span<const forward_item> items);
    // The same, reaching each layer's buffers only through `gate` (loads in flight: host tier).
    // Also errors when a layer's load fails or misses its deadline.
    result<forward_output> forward(const cache::layer_gate& gate, std::span<const forward_item> items);
    // The same, with the logits left in `logits`: [rows, vocab], the items' rows back to back in
    // item order (logit_row_count each), written there by the head itself. The engine passes its
    // step output, so a step's logits exist once (at V4-Flash's vocabulary a 2048-row step's are
    // 1 GiB); forward() copies them out per item. A batch without logit rows skips the head.
    status forward_into(const cache::layer_gate& gate, std::span<const forward_item> items,
                        std::vector<float>& logits);

    // Bytes the forward pass's step buffers hold now (grown to the largest step run so far, kept
    // between steps; per-thread kernel scratch not counted). model/step_memory.h bounds it.
    int64_t step_buffer_bytes() const;

private:
    explicit model(std::unique_ptr<model_impl> impl);
    std::unique_ptr<model_impl> impl_;
};

}  // namespace tandem::model
