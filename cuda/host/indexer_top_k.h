// cuda/host/indexer_top_k.h — The CPU reference's indexer top-k (model/attention.cpp
// top_k_ascending) restated for the device executor: K12's fallback for rows whose k-th boundary
// is an exact tie (kernel_math.h top_k_row says why such rows need it), run on the host over that
// row's downloaded scores so the GPU keeps exactly the rows the CPU keeps. If attention.cpp
// changes its selection, change it here too (the unit tests compare the two).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace tandem::cuda {

// The k largest of v[0..n) in ascending index order, exact ties broken as torch's CPU topk does
// (std::partial_sort when k·64 ≤ n, else std::nth_element, over (value, index) pairs compared by
// value only).
inline void indexer_top_k(const float* v, int64_t n, int64_t k, std::vector<int32_t>& idx) {
    idx.clear();
    if (k >= n) {
        idx.resize(static_cast<size_t>(n));
        std::iota(idx.begin(), idx.end(), 0);
        return;
    }
    std::vector<std::pair<float, int64_t>> q(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j)] = {v[j], j};
    auto larger = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) { return a.first > b.first; };
    if (k * 64 <= n) std::partial_sort(q.begin(), q.begin() + k, q.end(), larger);
    else std::nth_element(q.begin(), q.begin() + k - 1, q.end(), larger);
    for (int64_t j = 0; j < k; ++j) idx.push_back(static_cast<int32_t>(q[static_cast<size_t>(j)].second));
    std::sort(idx.begin(), idx.end());
}

}  // namespace tandem::cuda
