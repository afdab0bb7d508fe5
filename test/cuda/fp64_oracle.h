// test/cuda/fp64_oracle.h — fp64 oracles shared by the kernel-math unit tests and the parity
// harness (tier 2): the exact answer an fp32 kernel is measured against, with the magnitude that
// scales its error (errors are reported in units of 2^-24 × magnitude).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::oracle {

// Attention with sink for one (token, head): logits q·key_j × scale, softmax over {sink, logits},
// out[e] = Σ_j p_j key_j[e]; magnitude[e] = Σ_j |p_j key_j[e]|. `key(j)` gives key j's row.
struct attention_result {
    double denom = 0;
    std::vector<double> out, magnitude;
};
template <typename Key>
attention_result attention(const float* q, Key key, int64_t n_keys, int64_t dim, double scale, double sink) {
    std::vector<double> l(static_cast<size_t>(n_keys));
    double mx = sink;
    for (int64_t j = 0; j < n_keys; ++j) {
        double s = 0;
        for (int64_t e = 0; e < dim; ++e) s += double(q[e]) * key(j)[e];
        mx = std::max(mx, l[static_cast<size_t>(j)] = s * scale);
    }
    attention_result r;
    r.denom = std::exp(sink - mx);
    for (double& v : l) r.denom += (v = std::exp(v - mx));
    r.out.assign(static_cast<size_t>(dim), 0.0);
    r.magnitude.assign(static_cast<size_t>(dim), 0.0);
    for (int64_t e = 0; e < dim; ++e)
        for (int64_t j = 0; j < n_keys; ++j) {
            const double t = l[static_cast<size_t>(j)] / r.denom * key(j)[e];
            r.out[static_cast<size_t>(e)] += t;
            r.magnitude[static_cast<size_t>(e)] += std::fabs(t);
        }
    return r;
}

}  // namespace tandem::oracle
