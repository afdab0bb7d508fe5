// K12, the indexer's top-k (cuda/host/kernel_math.h top_k_row: the serial form of
// cuda/kernels_topk.cu's kernel, run by the host emulation), against the CPU reference's selection
// (model/top_k.h top_k_ascending, which the executor's host fallback also calls). The claim under
// test: a row K12 does not flag as tied gets exactly the CPU's rows; a row it flags is exactly one
// whose k-th boundary is an exact tie (or holds a NaN) — so after the fallback the device's choice
// equals the CPU's always.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../../cuda/attention_reference.h"
#include "cuda/host/kernel_math.h"

using namespace tandem;
namespace km = tandem::kmath;

namespace {

// Whether the k-th largest value of v is an exact tie at the boundary, counted independently of
// K12: sort, take the k-th value T, compare #{v == T} with the slots left after #{v > T}.
bool boundary_tied(const std::vector<float>& v, int64_t k) {
    for (float x : v)
        if (std::isnan(x)) return true;
    if (k >= static_cast<int64_t>(v.size())) return false;
    std::vector<float> s = v;
    std::sort(s.begin(), s.end(), [](float a, float b) { return a > b; });
    const float t = s[static_cast<size_t>(k - 1)];
    const int64_t above = std::count_if(v.begin(), v.end(), [t](float x) { return x > t; });
    const int64_t equal = std::count_if(v.begin(), v.end(), [t](float x) { return x == t; });
    return equal > k - above;
}

struct tally {
    int untied = 0, tied = 0;
};

// One row through K12, checked against the CPU's selection.
void check_row(const std::vector<float>& v, int64_t k, tally& t) {
    const int64_t n = static_cast<int64_t>(v.size());
    std::vector<int32_t> got(static_cast<size_t>(k), 7777), cpu;
    const bool tied = km::top_k_row(v.data(), n, k, got.data());
    attention_cpu::top_k_ascending(v, k, cpu);
    CHECK(tied == boundary_tied(v, k));
    const int64_t kept = std::min(n, k);
    for (int64_t j = kept; j < k; ++j) CHECK(got[static_cast<size_t>(j)] == -1);
    got.resize(static_cast<size_t>(kept));
    CHECK(std::is_sorted(got.begin(), got.end()));
    CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());
    if (!tied) {
        CHECK(got == cpu);
        ++t.untied;
    } else {
        // Tied rows keep the lowest-index equal values (the spec's total order); the executor
        // replaces them by the CPU's choice. Every value above the boundary is in, none below.
        ++t.tied;
        std::vector<float> s = v;
        std::sort(s.begin(), s.end(), [](float a, float b) { return a > b; });
        const float thr = s[static_cast<size_t>(k - 1)];
        if (std::isnan(thr)) return;
        for (int64_t j = 0; j < n; ++j)
            if (v[j] > thr) CHECK(std::binary_search(got.begin(), got.end(), static_cast<int32_t>(j)));
        for (int32_t j : got) CHECK(v[j] >= thr);
    }
}

std::vector<float> normal_row(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
}

}  // namespace

TEST_CASE("K12 top-k equals the CPU's selection on random rows (partial_sort and nth_element branches)") {
    tally t;
    for (int64_t n : {2, 5, 100, 700, 2000, 40000})
        for (int64_t k : {1, 4, 16, 512})
            for (uint32_t seed : {1u, 2u}) check_row(normal_row(n, seed * 1000 + static_cast<uint32_t>(n + k)), k, t);
    CHECK(t.tied == 0);  // continuous random values: no exact ties
    CHECK(t.untied > 40);
}

TEST_CASE("K12 top-k: exact ties away from the boundary keep the CPU's rows; ties across it are flagged") {
    tally t;
    std::mt19937 rng(7);
    for (int rep = 0; rep < 40; ++rep) {
        const int64_t n = 300 + rep * 37, k = 1 + rep * 3;
        std::vector<float> v = normal_row(n, 100 + static_cast<uint32_t>(rep));
        // Many copies of a few large values, all above the boundary: ties, but not at it.
        for (int64_t i = 0; i < k / 2; ++i) v[rng() % n] = 10.0f + static_cast<float>(i % 3);
        check_row(v, k, t);
        // The boundary value copied below the boundary too: an exact tie straddles it.
        std::vector<float> w = v;
        std::vector<float> s = w;
        std::sort(s.begin(), s.end(), [](float a, float b) { return a > b; });
        const float thr = s[static_cast<size_t>(k - 1)];
        for (int i = 0; i < 3; ++i) w[rng() % n] = thr;
        check_row(w, k, t);
    }
    CHECK(t.untied > 0);
    CHECK(t.tied > 0);
}

TEST_CASE("K12 top-k on ReLU-like rows: exact zeros (and −0), −inf, all equal, k ≥ visible, NaN") {
    tally t;
    for (int rep = 0; rep < 30; ++rep) {
        const int64_t n = 200 + rep * 11;
        std::vector<float> v = normal_row(n, 300 + static_cast<uint32_t>(rep));
        for (float& x : v) x = x < 0.3f ? (rep % 2 ? -0.0f : 0.0f) : x;  // most rows exactly zero
        for (int64_t k : {int64_t{4}, int64_t{64}, n / 2, n - 1, n, n + 5}) check_row(v, k, t);
        std::vector<float> w = v;  // −inf below: the boundary among the finite ones, or at −inf
        for (int64_t i = 0; i < n; i += 3) w[i] = -INFINITY;
        for (int64_t k : {int64_t{4}, n / 2, n - 2}) check_row(w, k, t);
    }
    check_row(std::vector<float>(50, 0.25f), 10, t);  // all equal: tied unless k ≥ n
    check_row(std::vector<float>(50, 0.25f), 50, t);
    std::vector<float> mixed_zero = {0.0f, -0.0f, 1.0f, -0.0f, 0.0f, 2.0f};
    check_row(mixed_zero, 3, t);  // −0 == +0 for the CPU's comparator: a tie, flagged
    check_row(mixed_zero, 2, t);
    std::vector<float> with_nan = normal_row(100, 9);
    with_nan[17] = NAN;
    std::vector<int32_t> out(10);
    CHECK(km::top_k_row(with_nan.data(), 100, 10, out.data()));  // a NaN: the host decides
    CHECK(t.untied > 0);
    CHECK(t.tied > 0);
}

TEST_CASE("K12 top_k_key orders floats like the CPU's comparator") {
    const float vals[] = {-INFINITY, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 1.0f, 3.4e38f, INFINITY};
    for (float a : vals)
        for (float b : vals) {
            CAPTURE(a);
            CAPTURE(b);
            CHECK((a < b) == (km::top_k_key(a) < km::top_k_key(b)));
            CHECK((a == b) == (km::top_k_key(a) == km::top_k_key(b)));
        }
}
