// model/compressor.cpp — see compressor.h.
#include "model/compressor.h"

#include <algorithm>
#include <cmath>

namespace tandem::model {

// Slots in order: previous Ca (rows 0..m−1, offset 0) then current Cb (rows m..2m−1, offset D)
// for CSA; the m tokens (offset 0) for HCA.
void pool_window(const compressor_shape& s, const float* ring, float* out) {
    const int64_t m = s.m, D = s.dim, cd = (s.overlap ? 2 : 1) * D, F = 2 * cd, n = (s.overlap ? 2 : 1) * m;
    auto at = [&](int64_t i) { return ring + i * F + (i >= m ? D : 0); };  // slot i's kv; score at + cd
    for (int64_t e = 0; e < D; ++e) {
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; ++i) mx = std::max(mx, at(i)[cd + e]);
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(at(i)[cd + e] - mx);
        float acc = 0.0f;
        for (int64_t i = 0; i < n; ++i) acc += at(i)[e] * (std::exp(at(i)[cd + e] - mx) / sum);
        out[e] = acc;
    }
}

}  // namespace tandem::model
