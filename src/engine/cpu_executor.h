// engine/cpu_executor.h — The model_executor over the CPU model (model/model.h).
//
// Sequences are slots of the shared page pool (pool_sequences); execute() turns the step plan
// into forward items and runs one model.forward_into for the whole batch, whose head writes the
// rows the plan asked for straight into the step output. The model keeps nothing per sequence,
// so dropping a slot drops its state.
#pragma once

#include <memory>

#include "engine/model_executor.h"
#include "engine/pool_capacity.h"
#include "model/model.h"

namespace tandem::engine {

class cpu_executor final : public model_executor {
  public:
    cpu_executor(std::unique_ptr<model::model> m, std::shared_ptr<pool_sequences> seqs);

    result<sequence_id> new_sequence() override { return seqs_->create(); }
    void free_sequence(sequence_id id) override { seqs_->destroy(id); }
    status execute(const step_plan& plan, step_output& out) override;
    int32_t vocab_size() const override;
    int32_t eos_token_id() const override;
    int64_t max_context_tokens() const override;

  private:
    std::unique_ptr<model::model> model_;
    std::shared_ptr<pool_sequences> seqs_;
    std::vector<model::forward_item> items_;  // reused between steps
};

}  // namespace tandem::engine
