// cuda/host/xxh3.h — XXH3-64 (seed 0, the default 192-byte secret), written once for host and device.
//
// Why our own: pd transfers between device pools checksum a span where it lies (at the source, and
// again where it landed) without reading it back to the host, so the hash must run in a kernel; and
// it must equal libxxhash's XXH3_64bits for the same bytes, because the other paths (tcp frames,
// host-tier pages, whole-transfer sums) compute it on the host and the two must agree. It is
// `__host__ __device__` (TANDEM_HD, as kernel_math.h): the CUDA kernel (cuda/kernels_checksum.cu)
// and the host emulation (device_runtime_emulated.cpp) run this same source, and the unit test
// (test/unit/cuda/test_xxh3.cpp) compares it with libxxhash for every length class.
//
// Written from the published algorithm description (xxhash's doc/xxhash_spec.md, "XXH3"), not from
// its code. Length classes: 0; 1–3; 4–8; 9–16; 17–128; 129–240; > 240 ("long": stripes of 64 bytes
// into 8 accumulators, a scramble every block of 16 stripes, a last stripe over the input's final
// 64 bytes, then a merge). Cost: one thread walks the whole span sequentially (the device kernel
// runs one span per block) — correct first; the 8 accumulator lanes are independent, so a faster
// kernel can give each lane its own thread later without changing the value.
#pragma once

#include <cstdint>

#include "cuda/host/kernel_math.h"  // TANDEM_HD

namespace tandem::kmath {

namespace xxh3_detail {

inline constexpr uint64_t k_prime32_1 = 0x9E3779B1u, k_prime32_2 = 0x85EBCA77u, k_prime32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t k_prime64_1 = 0x9E3779B185EBCA87ull, k_prime64_2 = 0xC2B2AE3D27D4EB4Full,
                          k_prime64_3 = 0x165667B19E3779F9ull, k_prime64_4 = 0x85EBCA77C2B2AE63ull,
                          k_prime64_5 = 0x27D4EB2F165667C5ull;
inline constexpr uint64_t k_prime_mx1 = 0x165667919E3779F9ull, k_prime_mx2 = 0x9FB21C651E98DF25ull;
inline constexpr int64_t k_secret_size = 192, k_stripe = 64, k_stripes_per_block = (k_secret_size - k_stripe) / 8;

// The specification's default secret (192 bytes). On the device it lives in constant memory (one
// copy per translation unit: internal linkage, no relocatable device code needed), on the host in
// a plain array; secret_byte hides which.
#define TANDEM_XXH3_SECRET                                                                                 \
    {0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,   \
     0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,   \
     0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,   \
     0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,   \
     0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,   \
     0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,   \
     0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,   \
     0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,   \
     0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,   \
     0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,   \
     0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,   \
     0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e}
#if defined(__CUDACC__)
static __constant__ uint8_t k_secret_device[192] = TANDEM_XXH3_SECRET;
#endif
inline constexpr uint8_t k_secret_host[192] = TANDEM_XXH3_SECRET;
#undef TANDEM_XXH3_SECRET

TANDEM_HD uint8_t secret_byte(int64_t i) {
#if defined(__CUDA_ARCH__)
    return k_secret_device[i];
#else
    return k_secret_host[i];
#endif
}

// Little-endian reads byte by byte: spans start at any byte offset (no alignment assumed).
TANDEM_HD uint64_t read_le(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
TANDEM_HD uint64_t read64(const uint8_t* p) { return read_le(p, 8); }
TANDEM_HD uint64_t read32(const uint8_t* p) { return read_le(p, 4); }
TANDEM_HD uint64_t secret64(int64_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | secret_byte(at + i);
    return v;
}
TANDEM_HD uint64_t secret32(int64_t at) {
    uint64_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | secret_byte(at + i);
    return v;
}

TANDEM_HD uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
TANDEM_HD uint64_t swap64(uint64_t x) {
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r = (r << 8) | ((x >> (8 * i)) & 0xff);
    return r;
}

// The 64×64 → 128 product, its halves xor-ed together.
TANDEM_HD uint64_t mul128_fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return (a * b) ^ __umul64hi(a, b);
#else
    const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

TANDEM_HD uint64_t xxh64_avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= k_prime64_2;
    h ^= h >> 29;
    h *= k_prime64_3;
    return h ^ (h >> 32);
}
TANDEM_HD uint64_t avalanche(uint64_t h) {
    h ^= h >> 37;
    h *= k_prime_mx1;
    return h ^ (h >> 32);
}
TANDEM_HD uint64_t rrmxmx(uint64_t h, uint64_t len) {
    h ^= rotl64(h, 49) ^ rotl64(h, 24);
    h *= k_prime_mx2;
    h ^= (h >> 35) + len;
    h *= k_prime_mx2;
    return h ^ (h >> 28);
}
TANDEM_HD uint64_t mix16(const uint8_t* in, int64_t sec) {
    return mul128_fold64(read64(in) ^ secret64(sec), read64(in + 8) ^ secret64(sec + 8));
}

TANDEM_HD uint64_t len_1to3(const uint8_t* in, uint64_t len) {
    const uint32_t combined = (uint32_t(in[0]) << 16) | (uint32_t(in[len >> 1]) << 24) | uint32_t(in[len - 1]) |
                              (uint32_t(len) << 8);
    return xxh64_avalanche(uint64_t(combined) ^ (secret32(0) ^ secret32(4)));
}
TANDEM_HD uint64_t len_4to8(const uint8_t* in, uint64_t len) {
    const uint64_t joined = read32(in + len - 4) + (read32(in) << 32);
    return rrmxmx(joined ^ (secret64(8) ^ secret64(16)), len);
}
TANDEM_HD uint64_t len_9to16(const uint8_t* in, uint64_t len) {
    const uint64_t lo = read64(in) ^ (secret64(24) ^ secret64(32));
    const uint64_t hi = read64(in + len - 8) ^ (secret64(40) ^ secret64(48));
    return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
}
// 17..128: pairs of 16-byte mixes from both ends, inward.
TANDEM_HD uint64_t len_17to128(const uint8_t* in, uint64_t len) {
    uint64_t acc = len * k_prime64_1;
    const int64_t n = static_cast<int64_t>(len);
    const int pairs = len > 96 ? 4 : len > 64 ? 3 : len > 32 ? 2 : 1;
    for (int i = pairs - 1; i >= 0; --i) {
        acc += mix16(in + 16 * i, 32 * i);
        acc += mix16(in + n - 16 * (i + 1), 32 * i + 16);
    }
    return avalanche(acc);
}
// 129..240: eight mixes, an avalanche, the remaining full 16-byte rounds at secret offset +3, the
// final 16 bytes at 136 − 17.
TANDEM_HD uint64_t len_129to240(const uint8_t* in, uint64_t len) {
    uint64_t acc = len * k_prime64_1;
    const int64_t rounds = static_cast<int64_t>(len) / 16;
    for (int64_t i = 0; i < 8; ++i) acc += mix16(in + 16 * i, 16 * i);
    acc = avalanche(acc);
    for (int64_t i = 8; i < rounds; ++i) acc += mix16(in + 16 * i, 16 * (i - 8) + 3);
    acc += mix16(in + len - 16, 136 - 17);
    return avalanche(acc);
}

TANDEM_HD void accumulate_stripe(uint64_t* acc, const uint8_t* in, int64_t sec) {
    for (int i = 0; i < 8; ++i) {
        const uint64_t v = read64(in + 8 * i);
        const uint64_t key = v ^ secret64(sec + 8 * i);
        acc[i ^ 1] += v;
        acc[i] += (key & 0xffffffffu) * (key >> 32);
    }
}
TANDEM_HD void scramble(uint64_t* acc) {
    for (int i = 0; i < 8; ++i) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= secret64(k_secret_size - k_stripe + 8 * i);
        acc[i] = a * k_prime32_1;
    }
}
TANDEM_HD uint64_t len_long(const uint8_t* in, uint64_t len) {
    uint64_t acc[8] = {k_prime32_3, k_prime64_1, k_prime64_2, k_prime64_3,
                       k_prime64_4, k_prime32_2, k_prime64_5, k_prime32_1};
    const int64_t n = static_cast<int64_t>(len);
    const int64_t block = k_stripe * k_stripes_per_block;
    const int64_t blocks = (n - 1) / block;
    for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t s = 0; s < k_stripes_per_block; ++s) accumulate_stripe(acc, in + b * block + s * k_stripe, 8 * s);
        scramble(acc);
    }
    const int64_t tail_stripes = ((n - 1) - block * blocks) / k_stripe;
    for (int64_t s = 0; s < tail_stripes; ++s) accumulate_stripe(acc, in + blocks * block + s * k_stripe, 8 * s);
    accumulate_stripe(acc, in + n - k_stripe, k_secret_size - k_stripe - 7);  // the last stripe
    uint64_t h = len * k_prime64_1;
    for (int i = 0; i < 4; ++i)
        h += mul128_fold64(acc[2 * i] ^ secret64(11 + 16 * i), acc[2 * i + 1] ^ secret64(11 + 16 * i + 8));
    return avalanche(h);
}

}  // namespace xxh3_detail

// XXH3_64bits(data, len) with seed 0: the value libxxhash gives for the same bytes.
TANDEM_HD uint64_t xxh3_64(const void* data, int64_t len) {
    namespace d = xxh3_detail;
    const uint8_t* in = static_cast<const uint8_t*>(data);
    const uint64_t n = static_cast<uint64_t>(len);
    if (n == 0) return d::xxh64_avalanche(d::secret64(56) ^ d::secret64(64));
    if (n <= 3) return d::len_1to3(in, n);
    if (n <= 8) return d::len_4to8(in, n);
    if (n <= 16) return d::len_9to16(in, n);
    if (n <= 128) return d::len_17to128(in, n);
    if (n <= 240) return d::len_129to240(in, n);
    return d::len_long(in, n);
}

}  // namespace tandem::kmath
