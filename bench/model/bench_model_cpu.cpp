// bench/model/bench_model_cpu.cpp — CPU throughput of the DeepSeek-V4 forward pass, each figure
// divided by a ceiling measured in the same run on the same threads (machine_limits.h):
//   prefill (compute-bound):  achieved FLOP/s ÷ the FMA peak (theoretical peak printed beside it)
//   batch-1 decode (memory):  weight bytes read per second ÷ STREAM-like read bandwidth
//   batch-B decode:           tokens/s ÷ batch-1 tokens/s at the same context, beside the ratio a
//                             roofline allows (see batch_ceiling), and tokens/s ÷ what a batch-B
//                             step at its roofline floor would give (against the measured batch 1)
// Each figure also prints the cores it used (process CPU seconds ÷ wall seconds): on a shared
// machine that says how much of the threads the figure actually got.
// Rounds are interleaved (prefill, batch 1, batch B, then again) and the best of each is kept:
// the dev machines are shared, so single figures are noisy. The two figures that move with the
// machine's memory bandwidth are also given per round, paired: batch 1 ÷ the read bandwidth
// measured just before and after it, and batch B ÷ the batch 1 of the same round, as the median
// over rounds (a shared VM's bandwidth swings between rounds, and best ÷ best can pair a busy
// moment of one side with a quiet one of the other).
//
// FLOPs count 2 per active linear weight per token (the headline figure leaves attention's own
// dot products out: a conservative count; a second line adds them), except that a prefill runs
// the lm head for its last token only (the benchmark asks for no prompt logits), so its head
// counts once per prefill, not once per token. (Until 4 December
// the prefill figure counted the head for every prompt token: 37% of `small`'s active weights and
// 47% of `flash-slice`'s, so it read 1.6× / 1.9× too high.) Bytes count what one decode token
// reads of the checkpoint's stored bytes: every tensor except the embedding, tid2eid and MTP, with
// routed experts (weights and scales) at top-k / E.
#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "machine_limits.h"
#include "model/make_model.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace {

using clock_type = std::chrono::steady_clock;
namespace model = tandem::model;
namespace cache = tandem::cache;

const char* k_usage =
    "usage: bench_model_cpu [--model DIR | --preset NAME] [--threads N] [--prompt N] [--decode N]\n"
    "                       [--context N] [--batch N] [--rounds N] [--cpu-matmul exact|amx]\n"
    "  --model DIR    checkpoint directory (default: generate --preset into a temp dir)\n"
    "  --preset NAME  make-model preset to generate (default small)\n"
    "  --threads N    worker threads (default: all cores)\n"
    "  --prompt N     prefill length (default 512)\n"
    "  --decode N     decode steps per measurement (default 32)\n"
    "  --context N    tokens each decoding sequence holds before its decode steps (default 64)\n"
    "  --batch N      sequences decoded together for the batch figure (default 16)\n"
    "  --rounds N     interleaved rounds, best kept (default 2)\n"
    "  --cpu-matmul M exact (default) or amx: BF16 / FP8 / FP4 matrices on AMX tiles, as backend.cpu_matmul;\n"
    "                 the FLOP ratios still count the fp32 model's multiply-adds\n";

// CPU seconds of the whole process (every pool thread): beside wall time it tells how much of
// the cores the figure actually got on a shared machine.
double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Active linear weights per token (multiply-adds per token, excluding attention scores).
double head_weights(const model::model_config& c) { return double(c.vocab_size) * double(c.hidden_size); }

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
    return w + head_weights(c);
}

// The multiply-adds of attention itself in a prefill of P tokens from position 0, beside the
// linears: per layer, query head and key it attends to, D for the score and D for the weighted
// value (the window's min(t + 1, W) keys at position t, plus the compressed rows: all visible ones,
// or the lightning indexer's top-k where more are visible — whose scoring, Hi · Di per visible row,
// counts too). attention.cpp computes exactly these dots and axpys.
double attention_macs_of_prefill(const model::model_config& c, int64_t P) {
    const double H = double(c.num_attention_heads), D = double(c.head_dim);
    double macs = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const auto& lc = c.layers[static_cast<size_t>(l)];
        for (int64_t t = 0; t < P; ++t) {
            double keys = double(std::min<int64_t>(t + 1, c.sliding_window));
            if (lc.compress_ratio > 0) {
                const int64_t visible = (t + 1) / lc.compress_ratio;
                const bool indexed = lc.attention == model::attention_type::csa && visible > c.index_topk;
                keys += double(indexed ? c.index_topk : visible);
                if (indexed) macs += double(visible) * double(c.index_n_heads * c.index_head_dim);
            }
            macs += 2.0 * H * D * keys;
        }
    }
    return macs;
}

// Stored bytes one decode step of B sequences reads (see the file comment): every routed expert
// some sequence of the step picked — with routing spread uniformly, a fraction 1 − (1 − k/E)^B of
// them (B = 1: k/E).
double bytes_read_per_step(const model::model_config& c, const model::checkpoint& ck, int64_t B) {
    double bytes = 0;
    const double unused = 1.0 - double(c.num_experts_per_tok) / double(c.n_routed_experts);
    const double routed = 1.0 - std::pow(unused, double(B));
    for (const auto& [name, view] : ck.tensors()) {
        auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
        if (name.rfind("mtp.", 0) == 0 || has("embed") || has("tid2eid")) continue;
        const bool expert = has(".experts.") && !has("shared_experts");
        bytes += double(view->nbytes) * (expert ? routed : 1.0);
    }
    return bytes;
}

// What a roofline allows the batch-B ÷ batch-1 ratio to reach on this machine: each step takes at
// least max(bytes it reads ÷ read bandwidth, its FLOPs ÷ FMA peak) — memory and arithmetic
// overlapped perfectly — so the ratio is at most B · floor(1) ÷ floor(B). A batch reads more than
// batch 1 (the union of the experts its sequences picked), which bounds the ratio well below B.
struct batch_ceiling {
    double ratio = 0, bytes = 0, flops = 0;
    bool memory_bound = true;
};
batch_ceiling ceiling_of(const model::model_config& c, const model::checkpoint& ck, int64_t B, double weights,
                         double peak_flops, double bandwidth) {
    const auto floor_of = [&](int64_t b, batch_ceiling& out) {
        out.bytes = bytes_read_per_step(c, ck, b);
        out.flops = 2.0 * weights * double(b);
        const double t_mem = out.bytes / bandwidth, t_fma = out.flops / peak_flops;
        out.memory_bound = t_mem >= t_fma;
        return std::max(t_mem, t_fma);
    };
    batch_ceiling one, many;
    const double t1 = floor_of(1, one), tB = floor_of(B, many);
    many.ratio = double(B) * t1 / tB;
    return many;
}

struct figures {
    double prefill_tps = 0, decode1_tps = 0, decodeB_tps = 0;
    // CPU seconds ÷ wall seconds of the best run of each figure (at most the thread count).
    double prefill_cpu = 0, decode1_cpu = 0, decodeB_cpu = 0;
};

// Keeps the faster of two (tok/s, cores used) measurements.
void keep_best(double tps, double cores, double& best_tps, double& best_cores) {
    if (tps > best_tps) best_tps = tps, best_cores = cores;
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir, preset = "small", cpu_matmul = "exact";
    int threads = 0;
    int64_t prompt = 512, decode = 32, context = 64, batch = 16, rounds = 2;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        if (k == "--help" || k == "-h") { std::fputs(k_usage, stdout); return 0; }
        if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n%s", k.c_str(), k_usage); return 2; }
        std::string v = argv[++i];
        if (k == "--model") dir = v;
        else if (k == "--preset") preset = v;
        else if (k == "--threads") threads = std::atoi(v.c_str());
        else if (k == "--prompt") prompt = std::atoll(v.c_str());
        else if (k == "--decode") decode = std::atoll(v.c_str());
        else if (k == "--context") context = std::atoll(v.c_str());
        else if (k == "--batch") batch = std::atoll(v.c_str());
        else if (k == "--rounds") rounds = std::atoll(v.c_str());
        else if (k == "--cpu-matmul") cpu_matmul = v;
        else { std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), k_usage); return 2; }
    }
    if (prompt < 1 || decode < 1 || context < 1 || batch < 1 || rounds < 1) {
        std::fprintf(stderr, "--prompt, --decode, --context, --batch and --rounds must be >= 1\n");
        return 2;
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
    auto opt = model::model_options_from("hf", threads, "huge", cpu_matmul);
    if (!opt) { std::fprintf(stderr, "%s\n", opt.error().message().c_str()); return 2; }
    auto m = model::model::load(dir, *opt);
    if (!m) { std::fprintf(stderr, "%s\n", m.error().message().c_str()); return 1; }
    auto ck = model::checkpoint::open_dir(dir);
    if (!ck) { std::fprintf(stderr, "%s\n", ck.error().message().c_str()); return 1; }
    const auto& c = (*m)->config();
    auto layout = cache::layout_spec::create(c, cache::layout_options{cache::kv_dtype::bf16, cache::index_k_dtype::bf16, 256});
    if (!layout) { std::fprintf(stderr, "%s\n", layout.error().message().c_str()); return 1; }
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{1} << 30, batch + 2});
    if (!pool) { std::fprintf(stderr, "%s\n", pool.error().message().c_str()); return 1; }
    tandem::cpu::thread_pool tp(threads);
    tandem::bench::fma_peak_result peak;
    double gemm_loop = 0;  // the GEMM's own FMA loop, FLOP/s (0 without the AVX-512 table)
    tandem::bench::read_bandwidth_probe probe(tp, tandem::bench::bandwidth_buffer_bytes());
    // Baselines are re-measured every round and the best kept, like the model figures, so a
    // busy moment on a shared machine does not deflate one side of a ratio only.
    auto measure_baselines = [&] {
        const auto p = tandem::bench::measure_fma_peak(tp);
        if (p.measured_flops > peak.measured_flops) peak = p;
        gemm_loop = std::max(gemm_loop, tandem::bench::measure_gemm_fma_loop(tp));
        probe.measure(5);
    };

    auto token_at = [&](int64_t seq, int64_t i) {
        return static_cast<int32_t>(2 + (uint64_t(i) * 7919 + uint64_t(seq) * 104729) % uint64_t(c.vocab_size - 2));
    };
    auto new_slot = [&](int64_t tokens) {
        cache::slot_ref s = (*pool)->alloc_sequence(1);
        (*pool)->reset_sequence_state(s);
        (*pool)->ensure_capacity(s, tokens);
        return s;
    };
    // What the engine runs (engine/cpu_executor.cpp): forward_into, the head writing the step's
    // logits into one buffer kept between steps. forward() would copy them out per item into new
    // vectors — at batch 16 of `small` 2 MiB a step, ~1.7% of its time, which no server pays.
    std::vector<float> logits;
    auto run = [&](std::vector<model::forward_item>& items) {
        auto st = (*m)->forward_into(cache::layer_gate(**pool), items, logits);
        if (!st) { std::fprintf(stderr, "forward: %s\n", st.message().c_str()); std::exit(1); }
    };
    // B sequences hold `context` tokens (one batched prefill), then decode `decode` steps together.
    auto decode_tps = [&](int64_t B) {
        std::vector<std::vector<int32_t>> toks(static_cast<size_t>(B));
        std::vector<cache::slot_ref> slots;
        std::vector<model::forward_item> items;
        for (int64_t s = 0; s < B; ++s) {
            for (int64_t i = 0; i < context + decode; ++i) toks[size_t(s)].push_back(token_at(s, i));
            slots.push_back(new_slot(context + decode));
            items.push_back({std::span<const int32_t>(toks[size_t(s)].data(), size_t(context)), 0, slots.back(), model::logit_rows::last});
        }
        run(items);
        const auto t0 = clock_type::now();
        const double c0 = process_cpu_seconds();
        for (int64_t step = 0; step < decode; ++step) {
            for (int64_t s = 0; s < B; ++s)
                items[size_t(s)] = {std::span<const int32_t>(&toks[size_t(s)][size_t(context + step)], 1), context + step,
                                    slots[size_t(s)], model::logit_rows::last};
            run(items);
        }
        const double wall = seconds_since(t0);
        const double cores = (process_cpu_seconds() - c0) / wall;
        for (auto s : slots) (*pool)->free_sequence(s);
        return std::pair<double, double>{double(B * decode) / wall, cores};
    };

    // Warm-up, untimed: the first forward pass of a process takes a page fault on every 4 KiB of
    // the mapped checkpoint (and of the pool). A server pays that once at its first request; a
    // benchmark that timed it would charge the prefill figure with it. The whole prompt length, so
    // the first round's prefill also finds the step buffers grown to its size (a server's steady
    // state; a 64-token warm-up left the first 512-token prefill ~7% slower on flash-slice).
    {
        std::vector<int32_t> tokens;
        for (int64_t i = 0; i < prompt; ++i) tokens.push_back(token_at(98, i));
        cache::slot_ref slot = new_slot(static_cast<int64_t>(tokens.size()));
        std::vector<model::forward_item> warm = {{tokens, 0, slot, model::logit_rows::last}};
        run(warm);
        (*pool)->free_sequence(slot);
    }

    const double w = active_weights_per_token(c), bytes = bytes_read_per_step(c, *ck, 1);
    figures best;
    // Per round: batch-1 bytes/s ÷ the bandwidth measured just before and just after it (mean of
    // the two), and batch B ÷ the batch 1 of the same round (see read_bandwidth_probe).
    std::vector<double> paired_bw, paired_batch;
    for (int64_t round = 0; round < rounds; ++round) {
        measure_baselines();
        std::vector<int32_t> tokens;
        for (int64_t i = 0; i < prompt; ++i) tokens.push_back(token_at(99, i));
        cache::slot_ref slot = new_slot(prompt);
        std::vector<model::forward_item> pre = {{tokens, 0, slot, model::logit_rows::last}};
        auto t0 = clock_type::now();
        const double c0 = process_cpu_seconds();
        run(pre);
        const double wall = seconds_since(t0);
        keep_best(double(prompt) / wall, (process_cpu_seconds() - c0) / wall, best.prefill_tps, best.prefill_cpu);
        (*pool)->free_sequence(slot);
        std::pair<double, double> one;  // batch-1 tok/s, cores used
        const double bw = probe.around(3, [&] { one = decode_tps(1); });
        const auto [d1, c1] = one;
        paired_bw.push_back(bytes * d1 / bw);
        keep_best(d1, c1, best.decode1_tps, best.decode1_cpu);
        if (batch > 1) {
            const auto [dB, cB] = decode_tps(batch);
            keep_best(dB, cB, best.decodeB_tps, best.decodeB_cpu);
            paired_batch.push_back(dB / d1);
        }
    }
    // "median m (lo-hi, N rounds)" of per-round figures.
    const auto spread = [](const std::vector<double>& v) {
        return fmt::format("median {:.3f} ({:.3f}-{:.3f}, {} round{})", tandem::bench::median_of(v),
                           *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), v.size(),
                           v.size() == 1 ? "" : "s");
    };
    std::printf("model %s: hidden %lld, layers %lld, vocab %lld, %.1f M active weights/token, %.1f MB read per "
                "decode token, threads %d, kernels %s%s\n",
                dir.c_str(), (long long)c.hidden_size, (long long)c.num_hidden_layers, (long long)c.vocab_size,
                w / 1e6, bytes / 1e6, tp.size(), tandem::cpu::kernel_isa(),
                opt->amx_matmul ? ", BF16 / FP8 / FP4 matrices on AMX tiles (--cpu-matmul amx)" : "");
    std::printf("weights: %s\n", (*m)->memory().describe().c_str());
    std::printf("baseline: FMA peak %.1f GFLOP/s measured (%s, 12 chains/thread)", peak.measured_flops / 1e9,
                peak.isa.c_str());
    if (peak.theoretical_flops > 0)
        std::printf("; theoretical %.1f GFLOP/s = %s", peak.theoretical_flops / 1e9, peak.theoretical_formula.c_str());
    if (gemm_loop > 0)
        std::printf("\nbaseline: the scratch GEMM's FMA loop alone (its register blocks over decoded weights in L1, no "
                    "decode, reductions or weight traffic) %.1f GFLOP/s = %.3f of the FMA peak: the most its "
                    "instruction mix gets from this core",
                    gemm_loop / 1e9, gemm_loop / peak.measured_flops);
    std::printf("\nbaseline: read bandwidth %.2f GB/s (sum over %lld MiB, 4x the %lld MiB last-level cache or 512 MiB; "
                "best of every measurement)\n",
                probe.best() / 1e9, (long long)(probe.buffer_bytes() >> 20),
                (long long)(tandem::bench::last_level_cache_bytes() >> 20));
    // Per prompt token: every active weight but the head; the head once for the whole prompt.
    const double head = head_weights(c);
    const double flops = 2 * ((w - head) + head / double(prompt)) * best.prefill_tps;
    std::printf("prefill: %lld tokens: %.1f tok/s, %.2f GFLOP/s = %.3f of FMA peak (linears, head counted once; "
                "cores used %.2f)\n",
                (long long)prompt, best.prefill_tps, flops / 1e9, flops / peak.measured_flops, best.prefill_cpu);
    const double attn_flops_per_prefill = 2 * attention_macs_of_prefill(c, prompt);
    const double attn_flops = attn_flops_per_prefill / double(prompt) * best.prefill_tps;
    std::printf("prefill with attention's own FLOPs (scores, weighted values, indexer: %.2f GFLOP per prefill, "
                "%.1f%% of the linears'): %.2f GFLOP/s = %.3f of FMA peak\n",
                attn_flops_per_prefill / 1e9, 100 * attn_flops / flops, (flops + attn_flops) / 1e9,
                (flops + attn_flops) / peak.measured_flops);
    std::printf("decode batch 1 (context %lld): %.2f tok/s, %.2f GB/s weights = %.3f of read bandwidth "
                "(best ÷ best; cores used %.2f)\n",
                (long long)context, best.decode1_tps, bytes * best.decode1_tps / 1e9,
                bytes * best.decode1_tps / probe.best(), best.decode1_cpu);
    std::printf("decode batch 1 paired: each round ÷ the read bandwidth measured just before and after it: %s\n",
                spread(paired_bw).c_str());
    if (batch > 1) {
        const double ratio = best.decodeB_tps / best.decode1_tps;
        std::printf("decode batch %lld (context %lld): %.2f tok/s = %.2f x batch 1 (best ÷ best; cores used %.2f; per "
                    "CPU second %.2f x batch 1); each round ÷ its own batch 1: %s\n",
                    (long long)batch, (long long)context, best.decodeB_tps, ratio, best.decodeB_cpu,
                    (best.decodeB_tps / best.decodeB_cpu) / (best.decode1_tps / best.decode1_cpu),
                    spread(paired_batch).c_str());
        const batch_ceiling ceil = ceiling_of(c, *ck, batch, w, peak.measured_flops, probe.best());
        std::printf("decode batch %lld ceiling: %.2f x batch 1 (roofline: a step reads %.1f MB with routing spread "
                    "uniformly and does %.2f GFLOP, %s-bound); measured = %.2f of it\n",
                    (long long)batch, ceil.ratio, ceil.bytes / 1e6, ceil.flops / 1e9,
                    ceil.memory_bound ? "memory" : "compute", ratio / ceil.ratio);
        // The ceiling above divides two roofline floors; a batch-1 step that reads part of its
        // weights from a large cache runs faster than its floor, which the ratio then cannot show.
        // So the batch-B floor again, against the batch 1 measured.
        const double floor_tps = double(batch) / std::max(ceil.bytes / probe.best(), ceil.flops / peak.measured_flops);
        std::printf("decode batch %lld at its roofline floor (bytes ÷ read bandwidth or FLOPs ÷ FMA peak): %.1f tok/s = %.2f x the measured batch 1 "
                    "(which read its weights at %.2f of the read bandwidth); measured = %.2f of it\n",
                    (long long)batch, floor_tps, floor_tps / best.decode1_tps, bytes * best.decode1_tps / probe.best(),
                    best.decodeB_tps / floor_tps);
    }
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
    return 0;
}
