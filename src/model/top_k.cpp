// model/top_k.cpp — see top_k.h.
#include "model/top_k.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tandem::model {

void top_k_ascending(std::span<const float> v, int64_t k, std::vector<int32_t>& idx) {
    const int64_t n = static_cast<int64_t>(v.size());
    idx.clear();
    if (k >= n) {
        idx.resize(static_cast<size_t>(n));
        std::iota(idx.begin(), idx.end(), 0);
        return;
    }
    thread_local std::vector<std::pair<float, int64_t>> q;
    q.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j)] = {v[static_cast<size_t>(j)], j};
    auto larger = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
        return a.first > b.first;
    };
    if (k * 64 <= n) std::partial_sort(q.begin(), q.begin() + k, q.end(), larger);
    else std::nth_element(q.begin(), q.begin() + k - 1, q.end(), larger);
    idx.reserve(static_cast<size_t>(k));  // exactly k when it grows (see fit)
    for (int64_t j = 0; j < k; ++j) idx.push_back(static_cast<int32_t>(q[static_cast<size_t>(j)].second));
    std::sort(idx.begin(), idx.end());
}

}  // namespace tandem::model
