// engine/model_executor.h — The boundary between the scheduler and a model.
//
// The scheduler decides what runs; an executor only runs it. It owns each sequence's model
// state (attention caches, compressor state) under a sequence_id it hands out, and executes a
// step_plan by appending each item's tokens to its sequence and returning the logits rows the
// plan asks for. Called on the scheduler thread only, one step at a time (lockstep).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/step_plan.h"

namespace tandem::engine {

class model_executor {
  public:
    virtual ~model_executor() = default;

    // A fresh, empty sequence. unavailable when the executor has no room for another.
    virtual result<sequence_id> new_sequence() = 0;
    // Drops a sequence's state; the id is not used again.
    virtual void free_sequence(sequence_id id) = 0;
    // Runs every item of the plan. An error fails the requests of this plan (the scheduler
    // frees their sequences); the executor must stay usable for other sequences.
    virtual status execute(const step_plan& plan, step_output& out) = 0;

    virtual int32_t vocab_size() const = 0;
    virtual int32_t eos_token_id() const = 0;
    virtual int64_t max_context_tokens() const = 0;
};

// Fills out.vocab / first_row / row_count for `plan` and returns the rows (helper for executors).
int64_t number_output_rows(const step_plan& plan, int32_t vocab, step_output& out);
// number_output_rows, then out.logits sized (zeroed) for those rows.
void prepare_output(const step_plan& plan, int32_t vocab, step_output& out);

}  // namespace tandem::engine
