// CPU kernels: a row's result never depends on the batch around it or on the thread count.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"

using namespace tandem::cpu;

TEST_CASE("cpu: linear is batch- and thread-invariant, bitwise") {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (int64_t in : {1, 15, 16, 37, 256}) {
        CAPTURE(in);
        const int64_t out = 29, rows = 7;
        std::vector<float> x(static_cast<size_t>(rows * in)), w(static_cast<size_t>(out * in));
        for (auto& v : x) v = nd(rng);
        for (auto& v : w) v = nd(rng);
        thread_pool one(1), two(2), four(4);
        std::vector<float> batched(static_cast<size_t>(rows * out)), other(batched.size());
        linear(two, x.data(), rows, in, w.data(), in, out, batched.data(), out);
        linear(four, x.data(), rows, in, w.data(), in, out, other.data(), out);
        CHECK(std::memcmp(batched.data(), other.data(), batched.size() * 4) == 0);
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> alone(static_cast<size_t>(out));
            linear(one, &x[r * in], 1, in, w.data(), in, out, alone.data(), out);
            CHECK(std::memcmp(alone.data(), &batched[r * out], static_cast<size_t>(out) * 4) == 0);
            for (int64_t o = 0; o < out; ++o) CHECK(alone[o] == dot(&x[r * in], &w[o * in], in));
        }
    }
}

TEST_CASE("cpu: thread pool covers every index exactly once") {
    thread_pool pool(3);
    for (int64_t n : {0, 1, 5, 1000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (int h : hits) CHECK(h == 1);
    }
}
