// cpu/attention_amx.h — attention's two products for one query row on AMX tiles, for
// backend.cpu_matmul = "amx": the scores q_h · k_j of every head h against the row's keys, and the
// weighted sums Σ_j p[h][j] · v_j (V4's keys are its values). The softmax between them stays with
// the caller (model/attention.cpp), in fp32 vector code.
//
// What it computes. The keys must hold values that are exactly bf16 — rows of a bf16 or fp8 KV
// cache (e4m3 × a power of two) decoded to fp32 — so they enter the tiles unchanged; q and p are
// split into three bf16 parts as x is for the linears (cpu/amx.h), every product is exact in fp32
// and the sums run in the tile unit's order: within a few fp32 roundings of the exact kernels'
// value, not bitwise it. An element's arithmetic depends only on its own q (or p) row and its own
// key (or key list, in order): never on the other heads, the thread, or the other rows of a batch,
// so prefill, chunks and decode give a row the same bits (design invariant 8). bf16 denormals
// count as zero, as on the linears' tiles.
//
// Why: the vector code is held to mul + add (its bits are the GPU's); on tiles a key's products
// for 16 heads cost about what one head's dot product did. Measured (Xeon 6 VM, alternating pairs):
// `amx` prefill +6-8% on `small`, +5.5% on `flash-slice`; a batch-16 step's attention went from
// ~8.5% to ~5.8% of its samples (the rest is the keys' conversion and the softmax), within noise of
// its throughput.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::cpu {

// Whether the tiles take rows of `dim` values (a multiple of 32) in this process.
bool amx_attention_fits(int64_t dim);

// One key row: `dim` floats holding bf16 values, or the `dim` bf16 values themselves (a bf16 KV
// cache row, read in place: no decode to fp32 and back). Either gives the same products.
struct key_row {
    const void* values = nullptr;
    bool bf16 = false;
};

// One query row's attention products. Per thread (its buffers are reused row after row).
class amx_attention_row {
public:
    // Takes the row's n keys: copied once as bf16 for both products.
    void load_keys(const key_row* keys, int64_t n, int64_t dim);
    // scores[h · stride + j] = q_h · k_j for heads h < heads (q_h = q + h · dim), j < n.
    void scores(const float* q, int64_t heads, float* scores, int64_t stride);
    // out[h · out_stride + i] = Σ_j p[h · p_stride + j] · k_j[i] for every i < dim: written, not added.
    void weighted_sums(const float* p, int64_t p_stride, int64_t heads, float* out, int64_t out_stride);

private:
    int64_t n_ = 0, dim_ = 0, padded_ = 0;  // padded_: n rounded up to 32, the padding keys zero
    std::vector<uint16_t> keys_;   // [padded_][dim_] bf16: the scores' A tiles, 16 keys each
    std::vector<uint16_t> pairs_;  // [padded_ / 2][dim_][2] bf16: the sums' B tiles (key pairs)
    std::vector<uint32_t> parts_;  // q's or p's three parts, laid out for the tiles
};

}  // namespace tandem::cpu
