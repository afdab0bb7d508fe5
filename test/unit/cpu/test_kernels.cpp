// CPU kernels: a row's result never depends on the batch around it or on the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/kernels_internal.h"
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

TEST_CASE("cpu: thread pool passes back to back never mix: each runs its own function over its own range") {
    // Thousands of short passes in a row: workers still polling for one pass, or late from the
    // previous one, must claim pieces only of the pass that is current, and each pass must see
    // every index of its own range exactly once.
    for (int threads : {2, 3, 4}) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::vector<int> hits(64);
        for (int pass = 0; pass < 3000; ++pass) {
            const int64_t n = 1 + pass % 61;
            std::fill(hits.begin(), hits.end(), 0);
            pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)] += pass + 1;
            });
            int64_t wrong = 0;
            for (int64_t i = 0; i < 64; ++i) wrong += hits[static_cast<size_t>(i)] != (i < n ? pass + 1 : 0);
            REQUIRE(wrong == 0);
        }
    }
}

TEST_CASE("cpu: attention's dots and axpy give the reference bits on every instruction set") {
    const auto* avx2 = tandem::cpu::detail::avx2_kernels();
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (int64_t n : {1, 7, 8, 37, 128, 512}) {
        for (int64_t count : {1, 3, 4, 9}) {
            CAPTURE(n);
            CAPTURE(count);
            std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n * count));
            for (auto& v : q) v = nd(rng);
            for (auto& v : k) v = nd(rng);
            std::vector<const float*> keys;
            for (int64_t j = 0; j < count; ++j) keys.push_back(&k[j * n]);
            std::vector<float> got(static_cast<size_t>(count)), ref(got.size());
            scalar.dots(q.data(), keys.data(), count, n, ref.data());
            dots(q.data(), keys.data(), count, n, got.data());
            CHECK(std::memcmp(got.data(), ref.data(), got.size() * 4) == 0);
            // A key's score does not depend on which group of four it fell into.
            for (int64_t j = 0; j < count; ++j) CHECK(got[j] == scalar.dot(q.data(), keys[j], n));
            if (avx2) {
                avx2->dots(q.data(), keys.data(), count, n, got.data());
                CHECK(std::memcmp(got.data(), ref.data(), got.size() * 4) == 0);
            }
        }
        // axpy: y + a·x with the product rounded first, element by element.
        std::vector<float> x(static_cast<size_t>(n)), y0(static_cast<size_t>(n));
        for (auto& v : x) v = nd(rng);
        for (auto& v : y0) v = nd(rng);
        const float a = nd(rng);
        std::vector<float> want = y0, got = y0, got_scalar = y0;
        for (int64_t i = 0; i < n; ++i) {
            const volatile float p = a * x[static_cast<size_t>(i)];
            want[static_cast<size_t>(i)] = want[static_cast<size_t>(i)] + p;
        }
        axpy(a, x.data(), got.data(), n);
        scalar.axpy(a, x.data(), got_scalar.data(), n);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
        CHECK(std::memcmp(got_scalar.data(), want.data(), got.size() * 4) == 0);
        if (avx2) {
            got = y0;
            avx2->axpy(a, x.data(), got.data(), n);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
        }
    }
}

TEST_CASE("cpu: axpys gives the bits of one axpy per x in order, on every instruction set") {
    const auto* avx2 = tandem::cpu::detail::avx2_kernels();
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    std::mt19937 rng(12);
    std::normal_distribution<float> nd;
    for (int64_t n : {1, 7, 64, 100, 128, 200, 512}) {
        for (int64_t count : {0, 1, 3, 9, 70}) {
            CAPTURE(n);
            CAPTURE(count);
            std::vector<float> xs(static_cast<size_t>(n * count)), a(static_cast<size_t>(count)),
                y0(static_cast<size_t>(n));
            for (auto& v : xs) v = nd(rng);
            for (auto& v : a) v = nd(rng);
            for (auto& v : y0) v = nd(rng);
            std::vector<const float*> x;
            for (int64_t j = 0; j < count; ++j) x.push_back(&xs[j * n]);
            std::vector<float> want = y0;
            for (int64_t j = 0; j < count; ++j) scalar.axpy(a[j], x[j], want.data(), n);
            std::vector<float> got = y0;
            axpys(a.data(), x.data(), count, got.data(), n);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            got = y0;
            scalar.axpys(a.data(), x.data(), count, got.data(), n);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            if (avx2) {
                got = y0;
                avx2->axpys(a.data(), x.data(), count, got.data(), n);
                CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            }
        }
    }
}
