// engine/rng.h — Counter-based random numbers for sampling.
//
// A draw is a pure function of (seed, position, stream): no generator state is carried between
// steps, so the token a seeded request draws at output position p is the same whatever else
// shares its batch, however its prompt was chunked and whether it was preempted and recomputed.
// The mixer is SplitMix64's finalizer (a bijection with good avalanche), applied twice so the
// seed and the counter are both fully mixed before they meet.
#pragma once

#include <cstdint>

namespace tandem::engine {

inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A uniform double in [0, 1) for (seed, position, stream); 53 random bits.
inline double counter_uniform(uint64_t seed, uint64_t position, uint64_t stream = 0) {
    uint64_t h = mix64(mix64(seed) ^ mix64(position * 0x632be59bd9b4e019ULL + stream));
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace tandem::engine
