// cpu/dots_avx512.cpp — the AVX-512 table's dots_heads: attention's and the indexer's scores,
// two heads per register.
//
// Why: every head of a row scores the same keys (one K = V row per position, shared by all
// heads; the indexer's heads share its index-K rows the same way), so a zmm holds two heads' 8
// lanes side by side — [q_h(k..k+7) | q_h+1(k..k+7)], built once per column step — and each key's
// 8 values reach both halves through a broadcast load (no shuffle uop). One zmm fma then does the
// work of two of the AVX2 dots' ymm fmas. Two keys per zmm instead (the single-query dots) would
// need a cross-lane insert per key, which costs what it saves; that is why `dots` stays AVX2.
//
// Order: each half is one head's accumulator for one key and sees exactly the fmas of dots_avx2's
// ymm accumulator (lane l: k ≡ l mod 8, ascending k), then the same hsum and the same scalar tail
// — the same bits as the reference dot, whatever the head count, the key count or the pairing. An
// odd last head goes through the AVX2 dots.
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include "cpu/pair_decoders_avx512.h"  // TANDEM_AVX512, both_halves, halves_of, hsum, lane_sums16

namespace tandem::cpu::detail {

namespace {

using namespace pair512;

// Silenced as in gemm_avx512.cpp: GCC 12's extract / insert intrinsics pass an _mm512_undefined_*
// operand and then warn that it may be used uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// U keys (independent fma chains: eight hide the fma latency with loads to spare) for the head
// pair (q0, q1).
template <int U>
TANDEM_AVX512_INLINE void pair_block(const float* q0, const float* q1, const float* const* keys, int64_t n,
                                     float* out0, float* out1) {
    const int64_t n8 = n & ~int64_t{7};
    __m512 acc[U];
    for (int u = 0; u < U; ++u) acc[u] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n8; k += 8) {
        const __m512 qv = halves_of(q0 + k, q1 + k);
        for (int u = 0; u < U; ++u) acc[u] = _mm512_fmadd_ps(qv, both_halves(keys[u] + k), acc[u]);
    }
    if constexpr (U == 8) {
        if (n8 == n) {  // no scalar tail: the sixteen sums in registers, as the scratch GEMM's
            // lane_sums16's block i: (key i, head 0), (key i, head 1), (key 4 + i, head 0), (key 4 + i, head 1).
            const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
            const __m512 sums = _mm512_permutexvar_ps(order, lane_sums16(&acc[0], &acc[4]));
            _mm256_storeu_ps(out0, low_half(sums));
            _mm256_storeu_ps(out1, high_half(sums));
            return;
        }
    }
    for (int u = 0; u < U; ++u) {
        float s0 = hsum(low_half(acc[u])), s1 = hsum(high_half(acc[u]));
        for (int64_t k = n8; k < n; ++k) {
            s0 = __builtin_fmaf(q0[k], keys[u][k], s0);
            s1 = __builtin_fmaf(q1[k], keys[u][k], s1);
        }
        out0[u] = s0;
        out1[u] = s1;
    }
}

TANDEM_AVX512 void dots_pair(const float* q0, const float* q1, const float* const* keys, int64_t count, int64_t n,
                             float* out0, float* out1) {
    constexpr int U = 8;
    int64_t j = 0;
    for (; j + U <= count; j += U) pair_block<U>(q0, q1, keys + j, n, out0 + j, out1 + j);
    switch (count - j) {
        case 7: return pair_block<7>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 6: return pair_block<6>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 5: return pair_block<5>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 4: return pair_block<4>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 3: return pair_block<3>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 2: return pair_block<2>(q0, q1, keys + j, n, out0 + j, out1 + j);
        case 1: return pair_block<1>(q0, q1, keys + j, n, out0 + j, out1 + j);
        default: return;
    }
}

#pragma GCC diagnostic pop

}  // namespace

void dots_heads_avx512(const float* q, int64_t q_stride, int64_t heads, const float* const* keys, int64_t count,
                       int64_t n, float* out, int64_t out_stride) {
    int64_t h = 0;
    for (; h + 2 <= heads; h += 2)
        dots_pair(q + h * q_stride, q + (h + 1) * q_stride, keys, count, n, out + h * out_stride,
                  out + (h + 1) * out_stride);
    if (h < heads) avx2_kernels()->dots(q + h * q_stride, keys, count, n, out + h * out_stride);
}

}  // namespace tandem::cpu::detail

#endif
