// model/indexer.h — (model/ internal) which compressed rows of a layer each query of a step
// attends to: every visible one (HCA, or CSA with no more rows than its top-k), else the lightning
// indexer's top-k of its scores. attention.cpp's pass calls it between reading a layer's state and
// decoding the rows chosen; the scores' order and the split over the threads are described in
// indexer.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward.h"

namespace tandem::model {

// One attention pass's view of its layer's indexer.
struct index_inputs {
    cpu::thread_pool& pool;
    const batch& b;
    const std::vector<int32_t>& seq_of;  // [b.rows]: each row's sequence in b.seqs
    const cache::layer_view& view;       // the layer's index-K rows
    const cache::row_format& fmt;        // their storage format
    const float* qi;                     // [b.rows, heads, dim]: the indexer's queries (RoPE applied)
    const float* iw;                     // [b.rows, heads]: its per-head weights
    int64_t heads, dim, top_k, rate;     // index_n_heads, index_head_dim, index_topk, compress ratio
    bool scores;                         // the layer has an indexer (CSA); HCA: every visible row
};

// selected[r] (resized to at least b.rows): the compressed rows row r attends to, ascending.
void select_compressed_rows(const index_inputs& in, std::vector<std::vector<int32_t>>& selected);

}  // namespace tandem::model
