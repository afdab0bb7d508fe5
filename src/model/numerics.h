// model/numerics.h — (model/ internal) the quantization simulations of numerics = "official"
// (dsv4-model.md §6). numerics = "hf" uses none of them.
//
// All are quantize-dequantize in place with power-of-two (ue8m0) block scales:
//   act_quant_fp8      FP8 e4m3, block 128 along K, amax floor 1e-4: activations entering a
//                      linear whose checkpoint weight is FP8/FP4 (§6.1)
//   kv_fp8_sim         FP8 e4m3, block 64, over the nope dims of main KV rows (§6.2); the rope
//                      dims are rounded to bf16, the dtype the official reference holds them in
//   indexer_fp4_sim    Walsh-Hadamard rotation (Sylvester order, × n^-1/2), then FP4 e2m1 in
//                      blocks of 32, amax floor 6·2^-126 (§6.3)
// A last partial block (shapes that are not multiples of the block) is scaled on its own.
#pragma once

#include <cstdint>

namespace tandem::model {

void act_quant_fp8(float* x, int64_t n);
void kv_fp8_sim(float* x, int64_t n_nope, int64_t n_total);
void hadamard_transform(float* x, int64_t n);  // n must be a power of two
void indexer_fp4_sim(float* x, int64_t n);     // hadamard + fp4

}  // namespace tandem::model
