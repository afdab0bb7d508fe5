// cpu/axpys_avx512.cpp — the AVX-512 table's axpys: attention's weighted value sums, the MoE
// combine and mHC's mixes, sixteen elements per register.
//
// Why: on a core with two 512-bit FMA pipes (a Xeon 6 VM here) a zmm multiply or add does twice
// a ymm one's work, and a 512-token prefill of `small` spent ~10% of its time in the AVX2 axpys.
// Each element is computed on its own — y[i] + a[j]·x[j][i], the product rounded, then the sum,
// in ascending j — so the register width changes no bit (kernels_internal.h: the axpys contract).
//
// Like kernels_avx2.cpp: only functions carrying TANDEM_AVX512 use AVX-512, and they call
// nothing from the standard library.
#include "cpu/kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include "cpu/pair_decoders_avx512.h"  // for TANDEM_AVX512

namespace tandem::cpu::detail {

namespace {

// V registers of y (16·V elements from y, the last register's live lanes under `tail`) stay in
// registers while every x[j] streams past: V independent add chains per j.
template <int V>
TANDEM_AVX512_INLINE void axpys_block(const float* a, const float* const* x, int64_t count, float* y, int64_t i,
                                      __mmask16 tail) {
    __m512 acc[V];
    for (int v = 0; v < V; ++v) {
        const __mmask16 m = v == V - 1 ? tail : __mmask16(0xffff);
        acc[v] = _mm512_maskz_loadu_ps(m, y + i + 16 * v);
    }
    for (int64_t j = 0; j < count; ++j) {
        const __m512 av = _mm512_set1_ps(a[j]);
        const float* xj = x[j] + i;
        for (int v = 0; v < V; ++v) {
            const __mmask16 m = v == V - 1 ? tail : __mmask16(0xffff);
            __m512 p = _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, xj + 16 * v));
            __asm__("" : "+v"(p));  // no fma contraction: the product is rounded, as the reference's
            acc[v] = _mm512_add_ps(acc[v], p);
        }
    }
    for (int v = 0; v < V; ++v) {
        const __mmask16 m = v == V - 1 ? tail : __mmask16(0xffff);
        _mm512_mask_storeu_ps(y + i + 16 * v, m, acc[v]);
    }
}

// The last 1-127 elements: as many registers as they need, the last one masked (masked loads
// read zeros and never fault in the dead lanes; the masked store writes only the live ones).
TANDEM_AVX512 void axpys_rest(const float* a, const float* const* x, int64_t count, float* y, int64_t i, int64_t n) {
    const int64_t left = n - i;
    const int regs = static_cast<int>((left + 15) / 16);
    const int live = static_cast<int>(left - 16 * (regs - 1));
    const __mmask16 tail = static_cast<__mmask16>((1u << live) - 1u);
    switch (regs) {
        case 1: return axpys_block<1>(a, x, count, y, i, tail);
        case 2: return axpys_block<2>(a, x, count, y, i, tail);
        case 3: return axpys_block<3>(a, x, count, y, i, tail);
        case 4: return axpys_block<4>(a, x, count, y, i, tail);
        case 5: return axpys_block<5>(a, x, count, y, i, tail);
        case 6: return axpys_block<6>(a, x, count, y, i, tail);
        case 7: return axpys_block<7>(a, x, count, y, i, tail);
        default: return axpys_block<8>(a, x, count, y, i, tail);
    }
}

}  // namespace

TANDEM_AVX512 void axpys_avx512(const float* a, const float* const* x, int64_t count, float* y, int64_t n) {
    constexpr int V = 8;  // 128 elements: one head_dim-128 row in one pass over the x rows
    int64_t i = 0;
    for (; i + 16 * V <= n; i += 16 * V) axpys_block<V>(a, x, count, y, i, __mmask16(0xffff));
    if (i < n) axpys_rest(a, x, count, y, i, n);
}

}  // namespace tandem::cpu::detail

#endif
