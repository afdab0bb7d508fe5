// CPU kernels: a row's result never depends on the batch around it or on the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>
#include <random>
#include <vector>

#include "core/exp_f32.h"
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

TEST_CASE("cpu: thread pool pieces shrink toward the end of a long pass; a short one is split evenly") {
    struct shape {
        int threads;
        int64_t n, grain;
    };
    for (const shape& c : {shape{2, 1000, 1}, shape{3, 1000, 1}, shape{4, 5000, 7}, shape{2, 100, 16}, shape{8, 100000, 1},
                           shape{16, 1000000, 3}, shape{2, 25, 16}, shape{3, 40, 8}, shape{2, 7, 1}}) {
        CAPTURE(c.threads);
        CAPTURE(c.n);
        CAPTURE(c.grain);
        thread_pool pool(c.threads);
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> pieces;
        pool.parallel_for(c.n, c.grain, [&](int64_t b, int64_t e) {
            std::lock_guard<std::mutex> lock(m);
            pieces.emplace_back(b, e);
        });
        std::sort(pieces.begin(), pieces.end());
        int64_t at = 0;
        for (const auto& [b, e] : pieces) {
            REQUIRE(b == at);
            REQUIRE(e > b);
            at = e;
        }
        REQUIRE(at == c.n);
        const int64_t grains = (c.n + c.grain - 1) / c.grain, share = 2 * c.threads;
        if (grains <= share) {  // one piece per grain, evenly
            CHECK(static_cast<int64_t>(pieces.size()) == grains);
            for (const auto& [b, e] : pieces) CHECK(e - b >= c.n / grains);
            for (const auto& [b, e] : pieces) CHECK(e - b <= c.n / grains + 1);
            continue;
        }
        // Guided: no thread starts with more than its share of half the pass, every piece holds a
        // grain, the last one less than two, and the claims grow with the log of the grains.
        CHECK(pieces.front().second <= std::max(c.grain, (c.n + share - 1) / share));
        for (const auto& [b, e] : pieces) CHECK(e - b >= c.grain);
        CHECK(pieces.back().second - pieces.back().first < 2 * c.grain);
        const double claims = static_cast<double>(share) * (std::log(static_cast<double>(grains) / share) + 2.0);
        CHECK(static_cast<double>(pieces.size()) <= claims);
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

// The vector tables this machine can run beside the scalar reference: AVX2, and the AVX-512 one
// where the CPU has AVX-512F (its per-element kernels are checked against the same bits).
static std::vector<const tandem::cpu::detail::kernel_table*> vector_tables() {
    std::vector<const tandem::cpu::detail::kernel_table*> tables;
    if (const auto* avx2 = tandem::cpu::detail::avx2_kernels()) tables.push_back(avx2);
#if defined(__x86_64__) && defined(__GNUC__)
    if (const auto* avx512 = tandem::cpu::detail::avx512_kernels(); avx512 && __builtin_cpu_supports("avx512f"))
        tables.push_back(avx512);
#endif
    return tables;
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

TEST_CASE("cpu: dots_heads gives every head the bits of its own dots, on every instruction set") {
    // The AVX-512 form scores two heads per register and sums eight keys' lanes at once when there
    // is no scalar tail; every head must still get the reference dot of its query and each key.
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    auto tables = vector_tables();
    tables.push_back(&scalar);
    std::mt19937 rng(13);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> octaves(-8.0f, 8.0f);  // mixed magnitudes: any reordered sum shows
    const auto value = [&] { return std::ldexp(nd(rng), static_cast<int>(octaves(rng))); };
    constexpr int64_t guard = 3;  // out_stride − count: scores written there are a bug
    for (int64_t n : {1, 7, 8, 37, 64, 128, 512}) {
        for (int64_t count : {0, 1, 3, 7, 8, 9, 16, 17, 70}) {
            for (int64_t heads : {1, 2, 3, 5}) {
                CAPTURE(n);
                CAPTURE(count);
                CAPTURE(heads);
                const int64_t q_stride = n + 5, out_stride = count + guard;
                std::vector<float> q(static_cast<size_t>(heads * q_stride)), k(static_cast<size_t>(n * count));
                for (auto& v : q) v = value();
                for (auto& v : k) v = value();
                std::vector<const float*> keys;
                for (int64_t j = 0; j < count; ++j) keys.push_back(&k[j * n]);
                std::vector<float> want(static_cast<size_t>(heads * out_stride), -7.0f);
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t j = 0; j < count; ++j) want[h * out_stride + j] = scalar.dot(&q[h * q_stride], keys[j], n);
                std::vector<float> got(want.size(), -7.0f);
                dots_heads(q.data(), q_stride, heads, keys.data(), count, n, got.data(), out_stride);
                CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
                for (const auto* table : tables) {
                    CAPTURE(table->name);
                    std::fill(got.begin(), got.end(), -7.0f);
                    table->dots_heads(q.data(), q_stride, heads, keys.data(), count, n, got.data(), out_stride);
                    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
                }
            }
        }
    }
}

TEST_CASE("cpu: axpys gives the bits of one axpy per x in order, on every instruction set") {
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    const auto tables = vector_tables();
    std::mt19937 rng(12);
    std::normal_distribution<float> nd;
    constexpr int64_t guard = 32;  // past y's end: a store there is a bug whatever it writes
    // Lengths around the 8-, 16-, 64- and 128-element steps of the vector forms and their tails.
    for (int64_t n : {1, 7, 15, 16, 17, 64, 100, 127, 128, 129, 200, 255, 256, 273, 512}) {
        for (int64_t count : {0, 1, 3, 9, 70}) {
            CAPTURE(n);
            CAPTURE(count);
            std::vector<float> xs(static_cast<size_t>(n * count)), a(static_cast<size_t>(count)),
                y0(static_cast<size_t>(n + guard));
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
            for (const auto* table : tables) {
                CAPTURE(table->name);
                got = y0;
                table->axpys(a.data(), x.data(), count, got.data(), n);
                CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            }
        }
    }
}

TEST_CASE("cpu: exp_f32 is within 1 ulp of e^x, and exp_shifted gives its bits and its ascending sum on every instruction set") {
    // Accuracy of the scalar definition against exp in double, over the whole range where e^x is
    // a normal fp32, subnormal or an overflow, plus a dense sweep of the softmax's range [-30, 0].
    const auto ulps = [](float got, double want) {
        if (std::isinf(want) || want > 3.4028234663852886e38) return std::isinf(got) ? 0.0 : 1e9;
        const float w = static_cast<float>(want);
        const double ulp = std::max(double(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(w), 0x1p-149);
        return std::fabs(double(got) - want) / ulp;
    };
    double worst = 0;
    for (int i = 0; i <= 400000; ++i) {
        const float x = -110.0f + 200.0f * float(i) / 400000.0f;
        worst = std::max(worst, ulps(tandem::exp_f32(x), std::exp(double(x))));
    }
    for (int i = 0; i <= 300000; ++i) {
        const float x = -30.0f * float(i) / 300000.0f;
        worst = std::max(worst, ulps(tandem::exp_f32(x), std::exp(double(x))));
    }
    CHECK(worst <= 1.0);  // 0.88 ulp when written
    CHECK(tandem::exp_f32(0.0f) == 1.0f);
    CHECK(tandem::exp_f32(-INFINITY) == 0.0f);
    CHECK(tandem::exp_f32(-200.0f) == 0.0f);
    CHECK(std::isinf(tandem::exp_f32(89.0f)));
    CHECK(std::isinf(tandem::exp_f32(INFINITY)));
    CHECK(std::isnan(tandem::exp_f32(NAN)));
    CHECK(tandem::exp_f32(88.7f) < INFINITY);
    CHECK(tandem::exp_f32(-100.0f) > 0.0f);  // a subnormal result, not flushed

    // exp_shifted: each value is exp_f32 of its shifted input, bit for bit, on every table, with
    // the special values and lengths that leave a 1-7 element tail.
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    std::mt19937 rng(13);
    std::normal_distribution<float> nd(0.0f, 20.0f);
    // Lengths leaving 1-7 (eight lanes) and 1-15 (sixteen lanes) element tails.
    for (int64_t n : {0, 1, 5, 8, 13, 16, 29, 64, 171, 300}) {
        CAPTURE(n);
        std::vector<float> v0(static_cast<size_t>(n));
        for (auto& v : v0) v = nd(rng);
        const float specials[] = {-INFINITY, 0.0f, -0.0f, 1e-30f, -104.5f, -103.9f, 88.72f, 89.5f, 92.0f, 300.0f};
        for (size_t i = 0; i < v0.size() && i < 10; ++i) v0[i * 7 % v0.size()] = specials[i];
        const float shift = 3.25f;
        std::vector<float> want = v0;
        float want_sum = 0.0f;
        for (auto& v : want) want_sum += (v = tandem::exp_f32(v - shift));
        // Bit for bit, except that a NaN's sign and payload are the instruction's (x86's scalar and
        // vector units quiet a NaN differently): NaN in, NaN out, is the contract.
        const auto same_float = [](float a, float b) {
            return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
        };
        const auto same = [&](const std::vector<float>& got, float sum) {
            for (size_t i = 0; i < want.size(); ++i) {
                CAPTURE(i);
                CHECK(same_float(got[i], want[i]));
            }
            CHECK(same_float(sum, want_sum));
        };
        REQUIRE(!std::isnan(want_sum));  // the sum check is strict here (NaN is the case below)
        std::vector<float> got = v0;
        same(got, exp_shifted(got.data(), n, shift));
        got = v0;
        same(got, scalar.exp_shifted(got.data(), n, shift));
        for (const auto* table : vector_tables()) {
            CAPTURE(table->name);
            got = v0;
            got.resize(v0.size() + 16, 7.0f);  // past the end: a store there is a bug
            same(got, table->exp_shifted(got.data(), n, shift));
            for (size_t i = v0.size(); i < got.size(); ++i) CHECK(got[i] == 7.0f);
        }
    }
    for (int64_t n : {3, 11}) {  // a NaN among finite values: NaN there, the others exact
        std::vector<float> v(static_cast<size_t>(n), 0.5f);
        v[1] = NAN;
        exp_shifted(v.data(), n, 0.0f);
        CHECK(std::isnan(v[1]));
        for (int64_t i = 0; i < n; ++i)
            if (i != 1) CHECK(v[static_cast<size_t>(i)] == tandem::exp_f32(0.5f));
    }
}

TEST_CASE("cpu: swiglu is silu(min(g, limit)) · clamp(u, ±limit) with exp_f32, bit for bit on every instruction set") {
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    std::mt19937 rng(14);
    std::normal_distribution<float> nd(0.0f, 6.0f);
    const auto same_float = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; };
    for (float limit : {10.0f, 7.0f, 0.0f}) {
        for (int64_t n : {1, 6, 8, 21, 37, 256}) {
            CAPTURE(limit);
            CAPTURE(n);
            std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
            for (auto& v : g) v = nd(rng);
            for (auto& v : u) v = nd(rng);
            const float specials[] = {0.0f, -0.0f, 1e9f, -1e9f, INFINITY, -INFINITY, 10.0f, -10.0f, 95.0f, -95.0f, NAN};
            for (size_t i = 0; i < 11 && i < g.size(); ++i) g[i] = specials[i], u[(i * 5 + 3) % u.size()] = specials[(i + 4) % 11];
            std::vector<float> want(static_cast<size_t>(n));
            for (size_t i = 0; i < want.size(); ++i) {
                const float gc = std::min(g[i], limit);
                want[i] = gc / (1.0f + tandem::exp_f32(-gc)) * std::clamp(u[i], -limit, limit);
            }
            const auto check = [&](const std::vector<float>& got) {
                for (size_t i = 0; i < want.size(); ++i) {
                    CAPTURE(i);
                    CHECK(same_float(got[i], want[i]));
                }
                for (size_t i = want.size(); i < got.size(); ++i) CHECK(got[i] == 7.0f);  // nothing past n
            };
            std::vector<float> got(static_cast<size_t>(n) + 16, 7.0f);
            swiglu(g.data(), u.data(), n, limit, got.data());
            check(got);
            scalar.swiglu(g.data(), u.data(), n, limit, got.data());
            check(got);
            for (const auto* table : vector_tables()) {
                CAPTURE(table->name);
                table->swiglu(g.data(), u.data(), n, limit, got.data());
                check(got);
            }
        }
    }
}

TEST_CASE("cpu: RMSNorm's scaling gives the reference bits on every instruction set, with and without weights") {
    const auto& scalar = tandem::cpu::detail::scalar_kernels();
    std::mt19937 rng(15);
    std::normal_distribution<float> nd;
    for (int64_t n : {1, 7, 8, 17, 61, 1024}) {
        std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n));
        for (auto& v : x) v = nd(rng);
        for (auto& v : w) v = nd(rng);
        const float r = 0.37f;
        for (const float* wp : {static_cast<const float*>(nullptr), static_cast<const float*>(w.data())}) {
            CAPTURE(n);
            std::vector<float> want(x.size()), got(x.size());
            for (size_t i = 0; i < x.size(); ++i) want[i] = wp ? wp[i] * (x[i] * r) : x[i] * r;
            scalar.scale_rows(x.data(), wp, r, n, got.data());
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            for (const auto* table : vector_tables()) {
                CAPTURE(table->name);
                std::vector<float> out(x.size() + 16, 7.0f);
                table->scale_rows(x.data(), wp, r, n, out.data());
                CHECK(std::memcmp(out.data(), want.data(), want.size() * 4) == 0);
                for (size_t i = x.size(); i < out.size(); ++i) CHECK(out[i] == 7.0f);  // nothing past n
                got = x;  // in place, as rms_norm calls it
                table->scale_rows(got.data(), wp, r, n, got.data());
                CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            }
        }
    }
}
