// cuda/host/kernel_math.h — The per-element math of the CUDA kernels, written once for both sides.
//
// Every function here is `__host__ __device__` under nvcc and plain inline C++ elsewhere, so the
// CUDA kernels (cuda/kernels_*.cu) and the host unit tests and emulation (test/unit/cuda/,
// cuda/host/*_emulated.cpp) run the SAME source.
// The unit tests compare these functions bit for bit with the CPU reference (cpu/kernels.h,
// cpu/weight_matrix.h, cache/codec.h, model/forward.h): what passes there is the exact operation
// sequence the GPU runs. Two things remain that only a GPU can show: the device's own libm
// (expf, sinf, cosf differ from glibc in the last bits: tier 2 of the parity harness — except the
// attention softmax's and SwiGLU's exponential, exp_f32 from core/exp_f32.h on both sides) and the
// compiler (the .cu files are built with --fmad=false so `a * b + c` is never contracted, exactly
// as g++ -std=c++20 leaves it; explicit fmaf is used where the CPU calls std::fma).
//
// Reduction orders (spec §3.5, fixed by the op's own shape, never by the batch):
//   fixed_dot         8 lane accumulators (lane l: fma over k ≡ l mod 8, ascending k below the
//                     last multiple of 8), pairwise (l, l+4), (l, l+2), (0, 1), then fma tail —
//                     the order of cpu/kernels_scalar.cpp, which every CPU ISA reproduces.
//   hc_* / attention  ascending j (streams) / ascending key index, sequential fp32 sums, as
//                     model/blocks.cpp and model/attention.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/exp_f32.h"  // the attention softmax's and SwiGLU's exponential, bitwise the CPU's

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif

namespace tandem::kmath {

// ---- bit casts and element formats ------------------------------------------------------------

TANDEM_HD float as_float(uint32_t bits) { return float_from_bits(bits); }
TANDEM_HD uint32_t as_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

TANDEM_HD float bf16_to_f32(uint16_t v) { return as_float(static_cast<uint32_t>(v) << 16); }
// Round to nearest even; NaN stays a quiet NaN (cache/codec.h float_to_bf16).
TANDEM_HD uint16_t f32_to_bf16(float x) {
    uint32_t u = as_bits(x);
    if (x != x) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
TANDEM_HD float f16_to_f32(uint16_t v) {
    const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16, e = (v >> 10) & 0x1fu, mant = v & 0x3ffu;
    if (e == 0) {
        const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
        return sign ? -mag : mag;
    }
    if (e == 31) return as_float(sign | 0x7f800000u | (mant << 13));
    return as_float(sign | ((e + 112u) << 23) | (mant << 13));
}
TANDEM_HD float ue8m0_to_f32(uint8_t v) {
    return v == 0 ? as_float(0x00400000u) : as_float(static_cast<uint32_t>(v) << 23);
}
// e4m3fn code placed into an fp32 exponent/mantissa: value · 2^-120 (cpu/weight_matrix.h).
TANDEM_HD float e4m3_times_2_pow_minus_120(uint8_t v) {
    return as_float((static_cast<uint32_t>(v & 0x80u) << 24) | (static_cast<uint32_t>(v & 0x7fu) << 20));
}
constexpr float k_two_pow_120 = 1.329227995784916e36f;
TANDEM_HD float e4m3_to_f32(uint8_t v) {
    if ((v & 0x7f) == 0x7f) return as_float(0x7fc00000u);  // e4m3fn NaN
    return e4m3_times_2_pow_minus_120(v) * k_two_pow_120;
}
TANDEM_HD float e2m1_magnitude(uint8_t code3) {
    // {0, .5, 1, 1.5, 2, 3, 4, 6} without a table (device code cannot read a host constexpr array).
    const float m = code3 < 4 ? 0.5f * static_cast<float>(code3) : static_cast<float>(1u << ((code3 >> 1) - 1)) * ((code3 & 1) ? 1.5f : 1.0f);
    return m;
}
TANDEM_HD float e2m1_to_f32(uint8_t nibble) {
    const float m = e2m1_magnitude(nibble & 7u);
    return (nibble & 8u) ? -m : m;
}
// Saturating RNE, as cache/codec.h (the official clamp to ±448).
TANDEM_HD uint8_t f32_to_e4m3(float x) {
    if (x != x) return 0x7f;
    const uint8_t sign = (as_bits(x) >> 31) ? 0x80 : 0x00;
    float a = fabsf(x);
    if (a > 448.0f) a = 448.0f;
    if (a < 0.015625f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(rintf(ldexpf(a, 9))));
    int e = 0;
    const float m = frexpf(a, &e);
    int ex = e - 1;
    int q = static_cast<int>(rintf((2.0f * m - 1.0f) * 8.0f));
    if (q == 8) q = 0, ++ex;
    const int code = ((ex + 7) << 3) | q;
    return static_cast<uint8_t>(sign | (code < 0x7e ? code : 0x7e));
}
TANDEM_HD uint8_t f32_to_e2m1(float x) {
    const uint8_t sign = (as_bits(x) >> 31) ? 0x8 : 0x0;
    const float a = fabsf(x);
    const uint8_t code = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                              (a >= 3.5f) + (a > 5.0f));
    return static_cast<uint8_t>(sign | code);
}
// 2^ceil(log2(max(amax, floor) / max_code)), exact from the bits (cache/codec.h pow2_block_scale).
TANDEM_HD float pow2_block_scale(float amax, float amax_floor, float max_code) {
    const float r = (amax > amax_floor ? amax : amax_floor) / max_code;
    int e = 0;
    const float m = frexpf(r, &e);
    return m == 0.5f ? ldexpf(1.0f, e - 1) : ldexpf(1.0f, e);
}

// Quantize-dequantize one block in place (numerics = "official": act_quant_fp8 block 128,
// kv_fp8_sim block 64): scale from the block's amax, clamp, round, rescale.
TANDEM_HD void qdq_e4m3_block(float* x, int64_t n, float amax_floor) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = amax < fabsf(x[i]) ? fabsf(x[i]) : amax;
    const float s = pow2_block_scale(amax, amax_floor, 448.0f);
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] / s;
        v = v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v);
        x[i] = e4m3_to_f32(f32_to_e4m3(v)) * s;
    }
}

// ---- the fixed-order dot product ------------------------------------------------------------

// Σ a(k)·b(k) in the CPU backend's one order (file comment). `a` and `b` are callables so a
// weight row can be decoded element by element in registers.
template <typename A, typename B>
TANDEM_HD float fixed_dot_fn(A a, B b, int64_t n) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    const int64_t n8 = n & ~int64_t{7};
    for (int64_t k = 0; k < n8; k += 8)
        for (int l = 0; l < 8; ++l) acc[l] = fmaf(a(k + l), b(k + l), acc[l]);
    for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; ++l) acc[l] += acc[l + 2];
    float s = acc[0] + acc[1];
    for (int64_t k = n8; k < n; ++k) s = fmaf(a(k), b(k), s);
    return s;
}
TANDEM_HD float fixed_dot(const float* a, const float* b, int64_t n) {
    return fixed_dot_fn([a](int64_t k) { return a[k]; }, [b](int64_t k) { return b[k]; }, n);
}

// ---- weights as stored --------------------------------------------------------------------

// A row-major [rows, cols] matrix in its checkpoint form (the device twin of cpu::weight_matrix,
// a plain struct so it can be passed to a kernel by value). `data` and `scales` point to the
// whole stored matrix; `row0` is this view's first row in it.
enum class wform : uint8_t { f32, bf16, f16, fp8_e4m3, fp4_e2m1 };
enum class sform : uint8_t { none, e8m0, f32 };

struct weight_view {
    wform form = wform::f32;
    sform scale = sform::none;
    int64_t rows = 0, cols = 0, row0 = 0;
    const uint8_t* data = nullptr;
    const uint8_t* scales = nullptr;
    int64_t block_rows = 1, block_cols = 1, scale_cols = 0;

    TANDEM_HD int64_t row_bytes() const {
        return form == wform::f32 ? cols * 4 : form == wform::fp8_e4m3 ? cols : form == wform::fp4_e2m1 ? cols / 2 : cols * 2;
    }
    TANDEM_HD float scale_at(int64_t r, int64_t c) const {
        if (scale == sform::none) return 1.0f;
        const int64_t at = ((row0 + r) / block_rows) * scale_cols + c / block_cols;
        if (scale == sform::e8m0) return ue8m0_to_f32(scales[at]);
        uint32_t bits = static_cast<uint32_t>(scales[4 * at]) | static_cast<uint32_t>(scales[4 * at + 1]) << 8 |
                        static_cast<uint32_t>(scales[4 * at + 2]) << 16 | static_cast<uint32_t>(scales[4 * at + 3]) << 24;
        return as_float(bits);
    }
    // Element (r, c) decoded exactly: code × scale, the numbers cpu::weight_matrix::at gives.
    TANDEM_HD float at(int64_t r, int64_t c) const {
        const uint8_t* row = data + (row0 + r) * row_bytes();
        switch (form) {
            case wform::f32:
                return as_float(static_cast<uint32_t>(row[4 * c]) | static_cast<uint32_t>(row[4 * c + 1]) << 8 |
                                static_cast<uint32_t>(row[4 * c + 2]) << 16 | static_cast<uint32_t>(row[4 * c + 3]) << 24);
            case wform::bf16: return bf16_to_f32(static_cast<uint16_t>(row[2 * c] | row[2 * c + 1] << 8));
            case wform::f16: return f16_to_f32(static_cast<uint16_t>(row[2 * c] | row[2 * c + 1] << 8));
            case wform::fp8_e4m3: return e4m3_times_2_pow_minus_120(row[c]) * (scale_at(r, c) * k_two_pow_120);
            case wform::fp4_e2m1: {
                const uint8_t nib = (c % 2 == 0) ? (row[c / 2] & 0xf) : (row[c / 2] >> 4);
                const float mag = e2m1_magnitude(nib & 7u);
                return (nib & 8 ? -mag : mag) * scale_at(r, c);
            }
        }
        return 0.0f;
    }
};

// y = Σ_k x[k] · w(o, k): one output of a linear layer, the K order of fixed_dot.
TANDEM_HD float linear_output(const float* x, const weight_view& w, int64_t o) {
    return fixed_dot_fn([x](int64_t k) { return x[k]; }, [&w, o](int64_t k) { return w.at(o, k); }, w.cols);
}

// ---- norms ----------------------------------------------------------------------------------

// 1 / sqrt(mean(x²) + eps), mean via fixed_dot (cpu::rms_norm).
TANDEM_HD float rms_inverse(const float* x, int64_t n, float eps) {
    const float ms = fixed_dot(x, x, n) / static_cast<float>(n);
    return 1.0f / sqrtf(ms + eps);
}
// y[i] = w[i] · (x[i] · r), or x[i] · r unweighted.
TANDEM_HD float rms_apply(float x, const float* w, int64_t i, float r) { return w ? w[i] * (x * r) : x * r; }

// ---- mHC (model/blocks.cpp) ---------------------------------------------------------------

TANDEM_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// From the mix logits of one token ([(2+n)·n]): pre [n], post [n], comb [n, n] with the Sinkhorn
// normalisation (column first, then `iters − 1` row/column rounds). n ≤ 8.
TANDEM_HD void hc_pre_weights(int64_t n, float eps, int64_t iters, const float* mix, const float* base,
                              const float* scale, float* pre, float* post, float* comb) {
    for (int64_t j = 0; j < n; ++j) {
        pre[j] = sigmoid(mix[j] * scale[0] + base[j]) + eps;
        post[j] = 2.0f * sigmoid(mix[n + j] * scale[1] + base[n + j]);
    }
    for (int64_t j = 0; j < n; ++j) {
        float* row = comb + j * n;
        float mx = -INFINITY;
        for (int64_t k = 0; k < n; ++k) {
            row[k] = mix[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
            mx = mx < row[k] ? row[k] : mx;
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += (row[k] = expf(row[k] - mx));
        for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
    }
    for (int64_t it = 0; it < iters; ++it) {
        if (it > 0)
            for (int64_t j = 0; j < n; ++j) {
                float s = 0.0f;
                for (int64_t k = 0; k < n; ++k) s += comb[j * n + k];
                for (int64_t k = 0; k < n; ++k) comb[j * n + k] /= (s + eps);
            }
        for (int64_t k = 0; k < n; ++k) {
            float s = 0.0f;
            for (int64_t j = 0; j < n; ++j) s += comb[j * n + k];
            for (int64_t j = 0; j < n; ++j) comb[j * n + k] /= (s + eps);
        }
    }
}
// collapsed[e] = Σ_j pre[j] · h[j, e], ascending j.
TANDEM_HD float hc_collapse(int64_t n, int64_t d, const float* pre, const float* h, int64_t e) {
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) s += pre[j] * h[j * d + e];
    return s;
}
// K18 HC head (hc_head_collapse): pre[j] = sigmoid(mix_j · scale[0] + base[j]) + hc_eps with
// mix_j = fn_j · (h · rsqrt(mean(h²) + norm_eps)) over the n·d values of h, no Sinkhorn. n ≤ 8.
TANDEM_HD void hc_head_weights(int64_t n, int64_t d, float norm_eps, float hc_eps, const float* h, const float* fn,
                               const float* base, const float* scale, float* pre) {
    const int64_t nd = n * d;
    const float inv = rms_inverse(h, nd, norm_eps);
    for (int64_t j = 0; j < n; ++j) {
        const float* f = fn + j * nd;
        const float mix = fixed_dot_fn([f](int64_t i) { return f[i]; }, [h, inv](int64_t i) { return h[i] * inv; }, nd);
        pre[j] = sigmoid(mix * scale[0] + base[j]) + hc_eps;
    }
}
// h_new[k, e] = post[k] · out[e] + Σ_j comb[j, k] · h_res[j, e], ascending j.
TANDEM_HD float hc_post_element(int64_t n, int64_t d, const float* out, const float* h_res, const float* post,
                                const float* comb, int64_t k, int64_t e) {
    float mixed = 0.0f;
    for (int64_t j = 0; j < n; ++j) mixed += comb[j * n + k] * h_res[j * d + e];
    return post[k] * out[e] + mixed;
}

// ---- RoPE (model/blocks.cpp rope_table::apply) ------------------------------------------------

// Rotates the pair (x[2i], x[2i+1]) at position pos; inverse uses −sin.
TANDEM_HD void rope_pair(float* x, int64_t i, float inv_freq, int64_t pos, bool inverse) {
    const float angle = static_cast<float>(pos) * inv_freq;
    const float cs = cosf(angle);
    float sn = sinf(angle);
    if (inverse) sn = -sn;
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs + (-b) * sn;
    x[2 * i + 1] = b * cs + a * sn;
}

// ---- attention with sink (model/attention.cpp attend) ---------------------------------------

// One (token, head): logits[j] = dot(q, key_j) · scale were computed for every key j (in the
// row's key order: window rows by position, then compressed rows by index). This turns them into
// probabilities in place and returns the denominator: max over {sink, logits}, then ascending-j
// sums of exp, the sink's term added last. Output element e is then Σ_j (p_j) · key_j[e] in
// ascending j (attention_output_element).
TANDEM_HD float attention_softmax(float* logits, int64_t n_keys, float sink) {
    float mx = sink;
    for (int64_t j = 0; j < n_keys; ++j) mx = mx < logits[j] ? logits[j] : mx;
    float denom = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) denom += (logits[j] = exp_f32(logits[j] - mx));
    denom += exp_f32(sink - mx);
    return denom;
}
template <typename Key>
TANDEM_HD float attention_output_element(const float* exp_logits, float denom, int64_t n_keys, Key key, int64_t e) {
    float o = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) o += (exp_logits[j] / denom) * key(j)[e];
    return o;
}

// ---- MoE (model/moe.cpp): K15 routing, SwiGLU, K16 combine --------------------------------------

// sqrt(softplus(x)), torch's softplus threshold 20.
TANDEM_HD float sqrt_softplus(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

TANDEM_HD float silu(float x) { return x / (1.0f + exp_f32(-x)); }  // cpu::swiglu's, bit for bit
// silu(min(g, limit)) · clamp(u, −limit, limit), std::min / std::clamp semantics.
TANDEM_HD float swiglu(float g, float u, float limit) {
    const float gc = limit < g ? limit : g;
    const float uc = u < -limit ? -limit : (limit < u ? limit : u);
    return silu(gc) * uc;
}

// `a` ranks before `b`: larger value first, lower index first on equal values — a strict total
// order on distinct indices, so any selection algorithm returns the same ids in the same order.
TANDEM_HD bool route_before(float va, int32_t a, float vb, int32_t b) { return va > vb || (va == vb && a < b); }

// The k best of v[0..n) in that order (k ≤ n ≤ 65536; k ≤ 16). O(n·k): a decode-sized top-k.
TANDEM_HD void route_top_k(const float* v, int32_t n, int32_t k, int32_t* out) {
    for (int32_t s = 0; s < k; ++s) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; ++e) {
            bool taken = false;
            for (int32_t t = 0; t < s; ++t) taken |= out[t] == e;
            if (taken) continue;
            if (best < 0 || route_before(v[e], e, v[best], best)) best = e;
        }
        out[s] = best;
    }
}

// Routing weights of the selected experts `sel` (selection order: top-k order, or tid2eid's
// order for hash layers): s[e] / (Σ_sel s, in selection order, + 1e-20 unless official) × scale.
// Then (expert, weight) pairs sorted by expert id, as the CPU's std::sort of pairs.
TANDEM_HD void route_weights(const float* s, const int32_t* sel, int32_t k, bool official, float scale,
                             int32_t* expert, float* weight) {
    float sum = 0.0f;
    for (int32_t i = 0; i < k; ++i) sum += s[sel[i]];
    const float denom = official ? sum : sum + 1e-20f;
    for (int32_t i = 0; i < k; ++i) {
        expert[i] = sel[i];
        weight[i] = s[sel[i]] / denom * scale;
    }
    for (int32_t i = 1; i < k; ++i)  // insertion sort by (expert, weight): k is tiny
        for (int32_t j = i; j > 0 && (expert[j] < expert[j - 1] || (expert[j] == expert[j - 1] && weight[j] < weight[j - 1])); --j) {
            const int32_t te = expert[j];
            expert[j] = expert[j - 1];
            expert[j - 1] = te;
            const float tw = weight[j];
            weight[j] = weight[j - 1];
            weight[j - 1] = tw;
        }
}

// out[j] = (0 + contrib[0][j] + contrib[1][j] + …) + shared[j]: routed experts in ascending id
// (their slots are already in that order), the shared expert last.
template <typename Contrib>
TANDEM_HD float moe_combine_element(Contrib contrib, int32_t slots, float shared) {
    float acc = 0.0f;
    for (int32_t sl = 0; sl < slots; ++sl) acc += contrib(sl);
    return acc + shared;
}

// ---- lightning indexer and compressors (model/attention.cpp, model/compressor.cpp) --------------------------------------

// K11: the score of one compressed row for one token: Σ_h (max(dot(q_h, key), 0) · idx_scale) ·
// (w_h · head_scale), ascending h, each dot in fixed_dot's order (select_rows).
TANDEM_HD float indexer_score(const float* q, const float* key, int64_t heads, int64_t dim, const float* w,
                              float idx_scale, float head_scale) {
    float sc = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
        const float dp = fixed_dot(q + h * dim, key, dim);
        sc += ((dp < 0.0f ? 0.0f : dp) * idx_scale) * (w[h] * head_scale);
    }
    return sc;
}

// K9: one feature e of a closed compressor window (pool_window): softmax over the window's slots
// of score = ring[slot][cd + off + e], weighted sum of kv = ring[slot][off + e]. Slots in order:
// CSA (overlap) the previous window's m rows at offset 0, then the current m rows at offset D;
// HCA the m rows at offset 0. Rows of the ring are F = 2·cd floats, cd = (overlap ? 2 : 1)·D.
TANDEM_HD float compressor_pool_feature(const float* ring, int64_t m, int64_t dim, bool overlap, int64_t e) {
    const int64_t cd = (overlap ? 2 : 1) * dim, F = 2 * cd, n = overlap ? 2 * m : m;
    // Slot j is ring row j (CSA: rows 0..m−1 the previous window, m..2m−1 the current one).
    auto off_of = [m, dim, overlap](int64_t j) { return overlap && j >= m ? dim : int64_t{0}; };
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        const float v = ring[j * F + cd + off_of(j) + e];
        mx = mx < v ? v : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += expf(ring[j * F + cd + off_of(j) + e] - mx);
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc += ring[j * F + off_of(j) + e] * (expf(ring[j * F + cd + off_of(j) + e] - mx) / sum);
    return acc;
}

// K9 ring update + pooling, one feature column of one sequence over the step's tokens (what
// run_compressor does per token, regrouped by column). Token i (position start + i, slot
// pos % m) writes its kv and gate + ape into ring row (overlap ? m : 0) + slot; a token that fills
// the window's last slot pools the window into pooled[w · dim + e] (w counts this call's closed
// windows) and, for CSA, moves the current rows to the "previous" half. Thread e owns ring columns
// {e, dim + e (CSA)} of the kv half and the same columns of the score half, and pooling feature e
// reads only those, so one thread per (sequence, feature) runs the whole step with no
// synchronisation, and every element gets the CPU's operations in the CPU's per-sequence order.
TANDEM_HD void compressor_feed_feature(const float* kv, const float* gate, const float* ape, float* ring, int64_t rows,
                                       int64_t start, int64_t m, int64_t dim, bool overlap, float* pooled, int64_t e) {
    const int64_t cd = (overlap ? 2 : 1) * dim, F = 2 * cd, ncol = overlap ? 2 : 1;
    int64_t emitted = 0;
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t pos = start + i, slot = pos % m;
        float* dst = ring + ((overlap ? m : 0) + slot) * F;
        for (int64_t c = e; c < ncol * dim; c += dim) {
            dst[c] = kv[i * cd + c];
            dst[cd + c] = gate[i * cd + c] + ape[slot * cd + c];
        }
        if (slot != m - 1) continue;
        pooled[emitted * dim + e] = compressor_pool_feature(ring, m, dim, overlap, e);
        ++emitted;
        if (!overlap) continue;
        for (int64_t j = 0; j < m; ++j)  // this window becomes "previous"
            for (int64_t c = e; c < cd; c += dim) {
                ring[j * F + c] = ring[(m + j) * F + c];
                ring[j * F + cd + c] = ring[(m + j) * F + cd + c];
            }
    }
}

// ---- K12 indexer top-k (model/top_k.h top_k_ascending) ----------------------------------------
//
// The CPU selects the k largest scores with libstdc++'s partial_sort / nth_element over (value,
// index) pairs compared by value only, so which of several EXACTLY equal scores it keeps is that
// algorithm's accident (torch's CPU topk does the same; ReLU makes exact zeros common). K12 is an
// exact threshold select: T = the k-th largest value (radix select over order-preserving keys,
// 4 digits of 8 bits), selected = {v > T} plus, among {v == T}, the lowest indices that fit. When
// #{v == T} equals the slots left for them, that set is {v ≥ T} — exactly k rows, which is the
// only set any correct top-k returns, the CPU's included. Otherwise (an exact tie straddles the
// boundary, or a NaN makes the order partial) the row is flagged "tied" and the executor runs the
// CPU's own selection on it (model::top_k_ascending): the GPU's choice equals the CPU's always.

// Order-preserving key: a < b ⇔ key(a) < key(b) for non-NaN floats; −0 and +0 (equal to the CPU's
// comparator) share one key.
TANDEM_HD uint32_t top_k_key(float v) {
    uint32_t u = as_bits(v);
    if ((u & 0x7fffffffu) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One radix step: hist[256] counts the candidates' digits (candidates: keys equal to the
// threshold's digits found so far); `need` (≥ 1) of the largest candidates are still to be taken.
// Returns the digit holding the need-th largest and lowers `need` by the candidates above it.
TANDEM_HD uint32_t top_k_pick_digit(const uint32_t* hist, int64_t& need) {
    for (uint32_t d = 255; d > 0; --d) {
        if (static_cast<int64_t>(hist[d]) >= need) return d;
        need -= hist[d];
    }
    return 0;
}

// K12 for one row, serially (the host emulation; the kernel runs the same passes with one CTA and
// the same two helpers above): out[0..k) = the selected indices of v[0..n) ascending, −1 padded
// when n < k (then all n are selected). Returns true when the row is tied at the boundary (or has
// a NaN): out then holds the lowest-index choice, and the CPU's selection must replace it.
TANDEM_HD bool top_k_row(const float* v, int64_t n, int64_t k, int32_t* out) {
    if (n <= k) {
        for (int64_t j = 0; j < k; ++j) out[j] = j < n ? static_cast<int32_t>(j) : -1;
        return false;
    }
    uint32_t hist[256], prefix = 0, mask = 0, equal = 0;
    int64_t need = k;
    bool nan = false;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = 0; d < 256; ++d) hist[d] = 0;
        for (int64_t j = 0; j < n; ++j) {
            nan |= v[j] != v[j];
            const uint32_t key = top_k_key(v[j]);
            if ((key & mask) == prefix) ++hist[(key >> shift) & 255u];
        }
        const uint32_t d = top_k_pick_digit(hist, need);
        prefix |= d << shift;
        mask |= 255u << shift;
        equal = hist[d];
    }
    int64_t taken = 0, equal_taken = 0;
    for (int64_t j = 0; j < n; ++j) {
        const uint32_t key = top_k_key(v[j]);
        if (key > prefix || (key == prefix && equal_taken++ < need)) out[taken++] = static_cast<int32_t>(j);
    }
    return nan || static_cast<int64_t>(equal) > need;
}

// ---- official numerics simulations of the q/kv/indexer paths (model/numerics.h) -----------------

// Walsh–Hadamard transform in Sylvester order, then × n^-1/2; n a power of two (hadamard_transform).
TANDEM_HD void hadamard_transform(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float scale = 1.0f / sqrtf(static_cast<float>(n));
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}
// FP4 e2m1 QDQ of one block with a power-of-two scale (amax floor 6·2^-126).
TANDEM_HD void qdq_e2m1_block(float* x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = amax < fabsf(x[i]) ? fabsf(x[i]) : amax;
    const float s = pow2_block_scale(amax, ldexpf(6.0f, -126), 6.0f);
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] / s;
        v = v < -6.0f ? -6.0f : (v > 6.0f ? 6.0f : v);
        x[i] = e2m1_to_f32(f32_to_e2m1(v)) * s;
    }
}
// K10 official: Hadamard rotation then FP4 in blocks of 32 (indexer_fp4_sim).
TANDEM_HD void indexer_fp4_sim(float* x, int64_t n) {
    hadamard_transform(x, n);
    for (int64_t b0 = 0; b0 < n; b0 += 32) qdq_e2m1_block(x + b0, n - b0 < 32 ? n - b0 : 32);
}
// K8 official: FP8 QDQ per 64 over the nope dims, the rope dims rounded to bf16 (kv_fp8_sim).
TANDEM_HD void kv_fp8_sim(float* x, int64_t n_nope, int64_t n_total) {
    for (int64_t b0 = 0; b0 < n_nope; b0 += 64) qdq_e4m3_block(x + b0, n_nope - b0 < 64 ? n_nope - b0 : 64, 1e-4f);
    for (int64_t i = n_nope; i < n_total; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace tandem::kmath
