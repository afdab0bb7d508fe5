// The device XXH3 (cuda/host/xxh3.h: the source the CUDA checksum kernel and the host emulation
// run) equals libxxhash's XXH3_64bits on the same bytes, in every length class of the algorithm —
// 0, 1–3, 4–8, 9–16, 17–128, 129–240, and > 240 with whole and partial stripes, one and several
// 1024-byte blocks — at unaligned starts, and through the emulated runtime's checksum op.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include <xxhash.h>

#include "cuda/host/device_runtime.h"
#include "cuda/host/xxh3.h"

using namespace tandem;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> b(n);
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    return b;
}

}  // namespace

TEST_CASE("device XXH3 equals libxxhash XXH3_64bits for every length 0..2100 at three alignments") {
    const std::vector<uint8_t> b = random_bytes(2200, 7);
    int64_t mismatches = 0;
    for (int64_t n = 0; n <= 2100; ++n) {
        for (int64_t off = 0; off < 3; ++off) {
            if (kmath::xxh3_64(b.data() + off, n) != XXH3_64bits(b.data() + off, static_cast<size_t>(n))) {
                if (++mismatches <= 5) MESSAGE("length " << n << " offset " << off);
            }
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("device XXH3 equals libxxhash on large spans: several blocks, whole and partial last stripes") {
    const std::vector<uint8_t> b = random_bytes(300000, 11);
    for (int64_t n : {4096, 4097, 8191, 65536, 65536 + 63, 131072 + 17, 147456, 299999}) {
        CAPTURE(n);
        CHECK(kmath::xxh3_64(b.data(), n) == XXH3_64bits(b.data(), static_cast<size_t>(n)));
    }
    // All-zero and all-0xff pages (what a fresh pool and a saturated row look like).
    for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
        const std::vector<uint8_t> flat(70000, fill);
        CHECK(kmath::xxh3_64(flat.data(), 70000) == XXH3_64bits(flat.data(), 70000));
    }
}

TEST_CASE("device XXH3: a flipped bit anywhere changes the value (the corruption it exists to catch)") {
    std::vector<uint8_t> b = random_bytes(5000, 3);
    const uint64_t h = kmath::xxh3_64(b.data(), 5000);
    for (size_t at : {size_t{0}, size_t{63}, size_t{1024}, size_t{4999}}) {
        b[at] ^= 0x80;
        CHECK(kmath::xxh3_64(b.data(), 5000) != h);
        b[at] ^= 0x80;
    }
}

TEST_CASE("device_runtime checksum on the host emulation is the same function") {
    auto rt = cuda::make_emulated_runtime();
    const std::vector<uint8_t> b = random_bytes(9000, 5);
    auto p = rt->alloc(9000, "test");
    REQUIRE(p.is_ok());
    REQUIRE(rt->upload(*p, b.data(), 9000).is_ok());
    for (int64_t n : {0, 3, 200, 9000}) {
        auto h = rt->checksum(*p, n);
        REQUIRE(h.is_ok());
        CHECK(*h == XXH3_64bits(b.data(), static_cast<size_t>(n)));
    }
    rt->free(*p);
}
