// model/sequence_state.h — (model/ internal) everything one sequence needs to continue.
//
// This is a per-sequence stand-in for the paged pool of src/cache (issue 3): each field below is
// one buffer kind the pool will hold, with the same row meaning, so moving it into pages is a
// change of addressing, not of semantics. Storage is fp32 (the hf-numerics golden tests' exact
// storage); rows are written once and never re-projected.
//
// Per layer (dsv4-model.md §3.1), with W = sliding_window, m = compress rate, D = head_dim,
// Di = index_head_dim, c = 2 for CSA (overlapping windows) else 1:
//   window      [W, D]       ring of the last W kv rows; row of position p at p % W
//   comp_rows   [n, D]       compressed kv rows, row w pools window w (n = length / m)
//   idx_rows    [n, Di]      CSA only: indexer key rows
//   comp / idx  compressor remainder: raw (kv, score+ape) of the tokens of the current, not
//               yet closed window ([length % m, c·D']) and, for CSA, the Ca half of the last
//               closed window ([m, D'] kv and score; score −inf before the first window).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::model {

struct compressor_state {
    std::vector<float> pending_kv, pending_score;  // [k, c·D'], k = tokens since the last emission
    std::vector<float> prev_kv, prev_score;        // [m, D'] (overlap only)
    bool has_prev = false;
};

struct layer_state {
    std::vector<float> window;     // [W, D]
    std::vector<float> comp_rows;  // [n, D]
    std::vector<float> idx_rows;   // [n, Di]
    compressor_state comp, idx;
};

struct sequence_state {
    int64_t length = 0;  // tokens processed
    std::vector<layer_state> layers;
};

}  // namespace tandem::model
