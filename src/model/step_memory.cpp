// model/step_memory.cpp — see step_memory.h. Each term names the buffer it stands for (model.cpp,
// attention.cpp, moe.cpp, and the kernels' per-thread scratch); a buffer added to the forward pass
// belongs here too, or the unit test that holds model::step_buffer_bytes() against this fails.
#include "model/step_memory.h"

#include <algorithm>

#include "model/forward.h"

namespace tandem::model {

namespace {

constexpr int64_t k_float = 4, k_int32 = 4, k_int64 = 8, k_pointer = 8;
constexpr int64_t k_vector = 24;          // a std::vector's own three pointers
constexpr int64_t k_small_struct = 96;    // a batch_seq, a seq_view, a linear_job (each ≤ this)
constexpr int64_t k_kernel_rows = 16;     // the AVX-512 two-rows tile packs up to 15 rows of x (tile_avx512.cpp)
constexpr int64_t k_gemm_scratch = 160 << 10;  // the scratch GEMM's weight runs and 60-row accumulators

}  // namespace

step_memory step_buffer_bound(const model_config& c, const step_shape& s, numerics_mode numerics, int threads) {
    const int64_t T = s.tokens, S = s.sequences, R = s.logit_rows, C = s.context_tokens;
    const int64_t L = std::min(s.longest_context, s.context_tokens);
    const int64_t d = c.hidden_size, n = c.hc_mult, V = c.vocab_size, H = c.num_attention_heads, D = c.head_dim;
    const int64_t W = c.sliding_window, ql = c.q_lora_rank, g = c.o_groups, ro = c.o_lora_rank;
    const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    const bool csa = c.count_layers(attention_type::csa, false) > 0;
    const bool hca = c.count_layers(attention_type::hca, false) > 0;
    const bool indexer = csa && c.index_n_heads > 0;
    const int64_t Hi = indexer ? c.index_n_heads : 0, Di = indexer ? c.index_head_dim : 0, topk = c.index_topk;
    const bool official = numerics == numerics_mode::official;
    const int64_t csa_rows = csa ? C / c.compress_rate_csa : 0, hca_rows = hca ? C / c.compress_rate_hca : 0;
    const int64_t longest_csa = csa ? L / c.compress_rate_csa : 0, longest_hca = hca ? L / c.compress_rate_hca : 0;

    step_memory m;
    // model.cpp: the batch, the residual streams and one sublayer's input / output / mHC terms.
    m.activations += T * (k_int32 + k_int64) + S * k_small_struct;
    m.activations += k_float * T * (2 * n * d + 2 * d + n + n * n + (2 + n) * n);
    // attention.cpp: projections (qr, q, kv, indexer q and weights), heads' output, grouped wo_a.
    m.activations += k_float * T * (ql + 2 * H * D + D + Hi * Di + Hi + g * ro);
    // The compressors' projections: CSA's two overlapping series (2D), HCA's one (D); the indexer's.
    m.activations += k_float * T * 2 * (csa ? 2 * D : hca ? D : 0) + k_float * T * 2 * (2 * Di);
    // moe.cpp: router logits, slots, inputs in expert order, w1 / w3 / SwiGLU, outputs, shared expert.
    m.activations += k_float * T * E + T * k * (2 * k_int32 + 2 * k_int64) + (E + 1) * k_int64;
    m.activations += k_float * T * k * (2 * d + 3 * I) + k_float * T * (3 * I + d);
    m.activations += (2 * E + 2) * k_small_struct;
    if (official) {
        // FP8-simulated copies: the gathered expert rows, the shared expert's input, a linear_set's
        // input (x or qr), and model_impl::linear's (the router's x, wo_b's z) on the calling thread.
        m.activations += k_float * T * (k * d + d + std::max(d, ql) + std::max(d, g * ro));
    }

    // attention.cpp: per sequence its window ring decoded, the selected compressed rows (CSA: at most
    // top-k per query; HCA: all), their slot map; per row its selection. The indexer's rows are
    // decoded a chunk at a time per thread (below), never the whole context.
    const int64_t selected_csa = indexer ? std::min(csa_rows, T * topk) : csa_rows;
    m.context += S * k_small_struct + k_float * S * W * D;
    m.context += k_int32 * std::max(csa_rows, hca_rows);
    m.context += k_float * std::max(selected_csa, hca_rows) * D;
    const int64_t per_row = std::max({indexer ? std::min(topk, longest_csa) : longest_csa, longest_hca});
    m.context += T * (k_int32 + k_vector + k_int32 * per_row);

    // model.cpp run_head: [rows, vocab], written into the engine's step output (model::forward_into,
    // engine/cpu_executor.cpp), and the rows it reads.
    m.logits = k_float * R * V + R * k_int64;

    // Each pool thread: the indexer's scores of a block of queries over the longest CSA context and
    // the (value, index) pairs top-k sorts, one chunk of decoded index rows with their pointers and
    // two heads' dots against them; attend()'s keys and two heads' logits; mHC's h_new; the
    // compressor rows; the two-rows tile's packed x (widest K: the mHC mixes' n·d) and the scratch GEMM.
    const int64_t keys = W + std::max(per_row, topk);
    const int64_t widest_k = std::max({n * d, d, H * D / std::max<int64_t>(g, 1), I, ql, g * ro});
    int64_t thread = indexer ? longest_csa * (k_index_queries * k_float + 16) +
                                   k_index_chunk * (Di * k_float + k_pointer + 2 * k_float)
                             : 0;
    thread += keys * (k_pointer + 2 * k_float);
    // attend_on_tiles (backend.cpu_matmul = "amx", cpu/attention_amx.h): the rows' fp32 pointers and
    // key_rows, every head's logits, the keys as bf16 twice (as they lie, and interleaved by pairs,
    // padded to 32) and q's or p's three parts. Counted whatever the mode: a bound.
    const int64_t padded_keys = (keys + 31) / 32 * 32;
    thread += keys * (3 * k_pointer + H * k_float) + 2 * padded_keys * D * 2 +
              std::max(padded_keys, D) / 32 * 3 * 256 * k_int32;
    thread += k_float * (n * d + 4 * std::max(D, Di) + k_kernel_rows * widest_k) + k_gemm_scratch;
    m.per_thread = std::max(threads, 1) * thread;
    return m;
}

step_shape largest_step(const model_config& c, const step_limits& limits, int64_t context_tokens) {
    const int64_t max_running = limits.max_running;
    step_shape s;
    s.tokens = limits.max_prefill_tokens + max_running;
    s.sequences = max_running;
    // One row per sequence (its last token's, or its decode row) and, on top, the prompt-logprob
    // rows a step may hold (the scheduler caps them: scheduler.max_prompt_logprob_tokens); then
    // the verifier's chunk, every row of which comes back into its own step output.
    s.logit_rows = std::min(s.tokens, std::min(limits.max_prefill_tokens, limits.max_prompt_logprob_tokens) + max_running) +
                   limits.verify_chunk_tokens;
    s.context_tokens = std::min(context_tokens, max_running * c.max_position_embeddings);
    s.longest_context = std::min(context_tokens, c.max_position_embeddings);
    return s;
}

}  // namespace tandem::model
