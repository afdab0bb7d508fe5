// cuda/host/step_metadata.h — The per-step metadata of a device forward pass (spec §5.5), built
// on the host from the scheduler's step_plan and uploaded once per step.
//
// Why on the host: every index a kernel needs (which token, which position, which sequence,
// which rows get logits, how far back each row's sliding window reaches, how many compressed
// rows each row may see) follows from the plan alone. Computing it here keeps kernels free of
// branches on batch composition — a row's entries depend only on its own plan item (design
// invariant 8) — and lets CI test it without a GPU. The semantics are the CPU model's
// (model/model.cpp, model/attention.cpp): position = start + k; the window of a row at position t
// is [max(0, t − W + 1), t], rows before the item's start come from the sequence's window ring,
// the others from the step itself; a layer of ratio m sees (t + 1) / m compressed rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/step_plan.h"

namespace tandem::cuda {

struct step_limits {
    int32_t vocab_size = 0;      // token ids must lie in [0, vocab_size)
    int64_t sliding_window = 0;  // W: window rows per sequence
    int64_t max_rows = 0;        // scratch capacity in rows (0: unchecked)
};

struct step_metadata {
    int64_t rows = 0;                  // new tokens in the step, items back to back
    std::vector<int32_t> token;        // [rows] K1: embedding row
    std::vector<int64_t> position;     // [rows] RoPE angle, window, compressor slot
    std::vector<int32_t> row_item;     // [rows] plan item (= sequence) of the row
    std::vector<int64_t> window_first; // [rows] first position of the row's sliding window
    std::vector<int64_t> item_row0;    // [items] first row of the item
    std::vector<int64_t> item_rows;    // [items] rows of the item
    std::vector<int64_t> item_start;   // [items] positions already in the sequence's state
    std::vector<int64_t> head_rows;    // rows the head (K18) computes logits for, in output order
    std::vector<int64_t> out_first_row;  // [items] index into head_rows of the item's first row, -1 none

    // Keys of row r's window that come from the sequence's ring (positions before the item's
    // start) vs from this step's own rows.
    int64_t ring_keys(int64_t r) const;
    int64_t step_keys(int64_t r) const { return position[r] - std::max(window_first[r], item_start[row_item[r]]) + 1; }
};

// Compressed rows visible to a token at `position` in a layer of compression `ratio`.
inline int64_t compressed_rows_visible(int64_t position, int64_t ratio) { return ratio > 0 ? (position + 1) / ratio : 0; }

// Errors (invalid_argument / out_of_range) name the plan item: an empty item, a negative start,
// a token outside the vocabulary, more rows than the scratch holds.
result<step_metadata> plan_step_metadata(const engine::step_plan& plan, const step_limits& limits);

}  // namespace tandem::cuda
