// cuda/host/device_executor.h — The model_executor over the device forward (device_forward.h).
//
// The same seam the CPU executor fills (engine/model_executor.h): sequences are slots of the
// shared page pool (pool_sequences), whose arena lives in the device space; execute() turns the
// step plan into step metadata on the host (step_metadata.h), runs the device forward for the
// whole batch behind the per-layer gate, and copies back the logits rows the plan asked for.
// The scheduler, sampler and cache code do not know which executor runs.
#pragma once

#include <memory>
#include <string>

#include "cuda/host/device_forward.h"
#include "cuda/host/device_runtime.h"
#include "engine/model_executor.h"
#include "engine/pool_capacity.h"
#include "model/model.h"

namespace tandem::cuda {

class device_executor final : public engine::model_executor {
public:
    // Reads model_dir's config.json and safetensors (validated as the CPU loader does) and uploads
    // the weights into `ops`' space. `seqs`' pool must be laid out for this model, its arena in
    // that space (the host pool for the emulation; cache::page_pool::create_external on a GPU).
    // `arena`: the pool's slab when ops allocated it (kept alive exactly as long as the executor,
    // freed before the ops); empty when the pool's arena is host memory. `share`: weights another
    // executor of this process already holds for model_dir (pd role both), read instead of loading
    // and uploading the checkpoint again; their runtime must address ops' space.
    static result<std::unique_ptr<device_executor>> create(std::unique_ptr<device_runtime> ops, device_buffer arena,
                                                           const std::string& model_dir,
                                                           model::numerics_mode numerics,
                                                           std::shared_ptr<engine::pool_sequences> seqs,
                                                           std::shared_ptr<const resident_weights> share = nullptr);

    result<engine::sequence_id> new_sequence() override { return seqs_->create(); }
    void free_sequence(engine::sequence_id id) override { seqs_->destroy(id); }
    status execute(const engine::step_plan& plan, engine::step_output& out) override;
    int32_t vocab_size() const override;
    int32_t eos_token_id() const override;
    int64_t max_context_tokens() const override;

    int64_t weight_bytes() const { return forward_->weight_bytes(); }
    // The weights this executor reads, for another executor of this process to share.
    const std::shared_ptr<const resident_weights>& weights() const { return weights_; }
    // K12 rows scored on the device since creation, and how many of them fell back to the host
    // selection (an exact tie at the k-th boundary).
    device_forward::top_k_counts top_k_stats() const { return forward_->top_k_stats(); }
    const device_runtime& ops() const { return *ops_; }

private:
    device_executor(std::unique_ptr<device_runtime> ops, device_buffer arena, std::shared_ptr<engine::pool_sequences> seqs)
        : ops_(std::move(ops)), arena_(std::move(arena)), seqs_(std::move(seqs)) {}

    // Outlives arena_ and forward_, whose buffers it frees; shared with the resident weights this
    // executor uploaded, which may outlive it (another engine reading them).
    std::shared_ptr<device_runtime> ops_;
    device_buffer arena_;
    std::shared_ptr<const resident_weights> weights_;
    std::unique_ptr<device_forward> forward_;
    std::shared_ptr<engine::pool_sequences> seqs_;
    std::vector<cache::slot_ref> slots_;  // reused between steps
};

}  // namespace tandem::cuda
