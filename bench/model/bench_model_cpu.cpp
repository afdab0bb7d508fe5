// bench/model/bench_model_cpu.cpp — CPU prefill and decode throughput of the DeepSeek-V4 forward
// pass, each printed next to a ceiling measured in the same run on the same threads:
//   prefill (compute-bound): achieved FLOP/s ÷ the machine's measured multiply-add peak
//   decode (memory-bound):   weight bytes streamed per second ÷ a STREAM-like copy bandwidth
//
//   build/bench_model_cpu [--model DIR | --preset small] [--threads N] [--prompt N] [--decode N]
//
// Without --model it generates the preset (make-model, seed 0) into a temp dir first. FLOPs and
// bytes count what one token touches: 2·(active linear weights) FLOPs and 4 bytes per active fp32
// weight (attention projections, compressors, indexer, shared + top-k routed experts, head).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "cpu/thread_pool.h"
#include "model/make_model.h"
#include "model/model.h"

namespace {

using clock_type = std::chrono::steady_clock;
namespace model = tandem::model;
namespace cache = tandem::cache;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// STREAM "copy": bytes read + written per second, best of 5, over a buffer far larger than caches.
double measure_copy_bandwidth(tandem::cpu::thread_pool& pool) {
    const int64_t n = int64_t{64} << 20;  // 64 Mi floats = 256 MiB each way
    std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = clock_type::now();
        pool.parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {
            std::memcpy(&b[static_cast<size_t>(i0)], &a[static_cast<size_t>(i0)], static_cast<size_t>(i1 - i0) * 4);
        });
        best = std::max(best, 2.0 * 4.0 * double(n) / seconds_since(t0));
    }
    if (b[static_cast<size_t>(n / 2)] != 1.0f) std::abort();
    return best;
}

// Multiply-add peak with the same instruction sets (AVX2 clone, no FMA contraction) and lane
// width (16) as cpu::dot.
__attribute__((target_clones("avx2", "default")))
void madd_loop(float (&out)[4][16], const float (&xin)[16], const float (&yin)[16], int64_t iters) {
    float acc[4][16], x[16], y[16];  // locals: no aliasing, so everything stays in registers
    std::memcpy(acc, out, sizeof acc);
    std::memcpy(x, xin, sizeof x);
    std::memcpy(y, yin, sizeof y);
    for (int64_t i = 0; i < iters; ++i)
        for (auto& row : acc)  // four independent chains hide the add latency
            for (int l = 0; l < 16; ++l) row[l] = row[l] * y[l] + x[l];
    std::memcpy(out, acc, sizeof acc);
}

double measure_fma_peak(tandem::cpu::thread_pool& pool) {
    const int threads = pool.size();
    const int64_t iters = 20'000'000;
    std::vector<float> sink(static_cast<size_t>(threads) * 64, 0.0f);
    auto t0 = clock_type::now();
    pool.parallel_for(threads, 1, [&](int64_t t0i, int64_t t1i) {
        for (int64_t t = t0i; t < t1i; ++t) {
            float acc[4][16], x[16], y[16];
            for (int l = 0; l < 16; ++l) x[l] = 1.0f + 1e-7f * l, y[l] = 0.999999f;
            for (auto& row : acc)
                for (float& v : row) v = 0.0f;
            madd_loop(acc, x, y, iters / 4);
            for (int l = 0; l < 16; ++l) sink[static_cast<size_t>(t * 64 + l)] = acc[0][l] + acc[1][l] + acc[2][l] + acc[3][l];
        }
    });
    const double s = seconds_since(t0);
    double guard = 0;
    for (float v : sink) guard += v;
    if (guard == 0) std::abort();
    return 2.0 * 16.0 * double(iters) * threads / s;
}

// Active linear weights per token (multiply-adds per token, excluding attention scores).
double active_weights_per_token(const model::model_config& c) {
    const double d = double(c.hidden_size), H = double(c.num_attention_heads), D = double(c.head_dim);
    double w = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const auto& lc = c.layers[static_cast<size_t>(l)];
        w += c.q_lora_rank * d + H * D * c.q_lora_rank + D * d;                           // wq_a, wq_b, wkv
        w += double(c.o_groups * c.o_lora_rank) * (H * D / c.o_groups) + d * c.o_groups * c.o_lora_rank;  // wo
        if (lc.attention != model::attention_type::sliding) {
            const double cd = (lc.attention == model::attention_type::csa ? 2.0 : 1.0) * D;
            w += 2 * cd * d;
        }
        if (lc.attention == model::attention_type::csa)
            w += double(c.index_n_heads * c.index_head_dim) * c.q_lora_rank + c.index_n_heads * d +
                 4.0 * c.index_head_dim * d;
        w += double(c.n_routed_experts) * d;                                               // router
        w += double(c.num_experts_per_tok + c.n_shared_experts) * 3.0 * c.moe_intermediate_size * d;
        w += 2.0 * double((2 + c.hc_mult) * c.hc_mult) * c.hc_mult * d;                     // mHC mixes
    }
    return w + double(c.vocab_size) * d;  // head
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir, preset = "small";
    int threads = 0;
    int64_t prompt = 512, decode = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") dir = v;
        else if (k == "--preset") preset = v;
        else if (k == "--threads") threads = std::atoi(v.c_str());
        else if (k == "--prompt") prompt = std::atoll(v.c_str());
        else if (k == "--decode") decode = std::atoll(v.c_str());
        else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
    }
    std::filesystem::path tmp;
    if (dir.empty()) {
        tmp = std::filesystem::temp_directory_path() / ("tandem_bench_" + preset);
        auto cfg = model::preset_config(preset);
        if (!cfg) { std::fprintf(stderr, "%s\n", cfg.error().message().c_str()); return 2; }
        model::make_model_options opt;
        opt.bf16 = cfg->torch_dtype == "bfloat16";
        opt.quantize = cfg->quantization.present;
        std::printf("generating preset %s ...\n", preset.c_str());
        if (auto st = model::write_random_checkpoint(*cfg, tmp.string(), opt); !st) {
            std::fprintf(stderr, "%s\n", st.message().c_str());
            return 1;
        }
        dir = tmp.string();
    }
    auto m = model::model::load(dir, model::model_options{model::numerics_mode::hf, threads});
    if (!m) { std::fprintf(stderr, "%s\n", m.error().message().c_str()); return 1; }
    const auto& c = (*m)->config();
    auto layout = cache::layout_spec::create(c, cache::layout_options{cache::kv_dtype::bf16, cache::index_k_dtype::bf16, 256});
    if (!layout) { std::fprintf(stderr, "%s\n", layout.error().message().c_str()); return 1; }
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{1} << 30, 4});
    if (!pool) { std::fprintf(stderr, "%s\n", pool.error().message().c_str()); return 1; }
    tandem::cpu::thread_pool tp(threads);
    const double copy_bw = measure_copy_bandwidth(tp), peak = measure_fma_peak(tp);

    std::vector<int32_t> tokens(static_cast<size_t>(prompt + decode));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(2 + (i * 7919) % (c.vocab_size - 2));
    cache::slot_ref slot = (*pool)->alloc_sequence(1);
    (*pool)->reset_sequence_state(slot);
    (*pool)->ensure_capacity(slot, prompt + decode);
    model::forward_item pre{std::span<const int32_t>(tokens.data(), size_t(prompt)), 0, slot, false};
    auto t0 = clock_type::now();
    if (!(*m)->forward(**pool, std::span<const model::forward_item>(&pre, 1))) return 1;
    const double prefill_s = seconds_since(t0);
    t0 = clock_type::now();
    for (int64_t i = 0; i < decode; ++i) {
        model::forward_item it{std::span<const int32_t>(&tokens[size_t(prompt + i)], 1), prompt + i, slot, false};
        if (!(*m)->forward(**pool, std::span<const model::forward_item>(&it, 1))) return 1;
    }
    const double decode_s = seconds_since(t0);

    const double w = active_weights_per_token(c);
    const double prefill_tps = double(prompt) / prefill_s, decode_tps = double(decode) / decode_s;
    std::printf("model %s: hidden %lld, layers %lld, vocab %lld, %.1f M active weights/token, threads %d\n",
                dir.c_str(), (long long)c.hidden_size, (long long)c.num_hidden_layers, (long long)c.vocab_size,
                w / 1e6, tp.size());
    std::printf("baseline: copy bandwidth %.2f GB/s, multiply-add peak %.2f GFLOP/s\n", copy_bw / 1e9, peak / 1e9);
    std::printf("prefill: %lld tokens in %.3f s = %.1f tok/s, %.2f GFLOP/s = %.3f of peak\n", (long long)prompt,
                prefill_s, prefill_tps, 2 * w * prefill_tps / 1e9, 2 * w * prefill_tps / peak);
    std::printf("decode:  %lld tokens in %.3f s = %.2f tok/s, %.2f GB/s weights = %.3f of copy bandwidth\n",
                (long long)decode, decode_s, decode_tps, 4 * w * decode_tps / 1e9, 4 * w * decode_tps / copy_bw);
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
    return 0;
}
