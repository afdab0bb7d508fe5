// model/top_k.h — the lightning indexer's selection: which k of a query's scored compressed rows
// it attends to. Public so the CUDA tests' reference (test/cuda/attention_reference.h) calls the
// model's own instead of restating it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::model {

// Indices of the k largest scores, returned in ascending index order. The candidates are the
// rows the query can see, nothing else, so every chunking (full prefill, chunks, token-by-token
// decode) selects the same rows — design invariant 8. Which of several EXACTLY equal scores wins
// follows torch.topk on CPU (at::native::topk_impl_loop: (value, index) pairs ordered by value
// only, std::partial_sort when k·64 <= n, else std::nth_element), because ReLU makes exact zero
// scores common. This reproduces HF transformers' token-by-token decode exactly; HF's
// full-sequence prefill also scores the not-yet-visible rows (at −inf), which can break such an
// exact tie differently — HF's own prefill and decode then disagree, and tandem follows decode.
void top_k_ascending(std::span<const float> v, int64_t k, std::vector<int32_t>& idx);

}  // namespace tandem::model
