// bench/cuda/bench_cuda_decode.cpp — The device executor's decode step time (the GPU check's
// micro-benchmark, issue #13 item 6) at batch 1 and 16 on a generated checkpoint (default
// flash-layer: one CSA layer at V4-Flash's full width), as a RATIO to a roofline measured in the
// same run: the weight bytes the step's linears read (counted per step: weight_read_counter.h)
// ÷ the device-to-device copy bandwidth. Ratio 1 = the step is as fast as reading its weights once
// at copy speed; phase-1 kernels (one thread per output) are expected far above it — this is the
// baseline phase 2 improves on. Each sequence first prefills a prompt; then `steps` decode steps
// run the whole batch in one plan (after one warm-up step); the median step is reported.
// Without a GPU: SKIP (exit 77). --emulate runs the same loop over the host emulation as a smoke
// test of the harness (flash-shape, batches 1 and 2; its times are NOT a figure, no roofline).
// Usage: bench_cuda_decode [--emulate] [--preset NAME] [--keep-models DIR] [--json PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "core/gpu_probe.h"
#include "cuda/host/cuda_ops.h"
#include "cuda/host/device_executor.h"
#include "generated_checkpoint.h"
#include "weight_read_counter.h"

using namespace tandem;

namespace {

struct options {
    bool emulate = false;
    std::string preset, keep, json;
    std::vector<int> batches;
    int prompt = 64, steps = 8;
};

struct step_figures {
    int batch = 0;
    double median_ms = 0, weight_mb = 0, roofline_ms = 0;
};

// One batch size: fresh sequences, prefill, warm-up, timed steps.
result<step_figures> run_batch(cuda::device_executor& dev, cuda::weight_read_counter& counter,
                               engine::pool_sequences& seqs, int batch, const options& o) {
    std::vector<engine::sequence_id> ids;
    for (int b = 0; b < batch; ++b) {
        auto s = dev.new_sequence();
        if (!s) return s.error();
        ids.push_back(*s);
    }
    const int32_t vocab = dev.vocab_size();
    engine::step_output out;
    auto step = [&](int64_t pos, int len) -> status {
        engine::step_plan p;
        for (int b = 0; b < batch; ++b) {
            engine::plan_item it;
            it.sequence = ids[static_cast<size_t>(b)];
            it.start_position = pos;
            for (int i = 0; i < len; ++i) it.tokens.push_back(static_cast<int32_t>(2 + (b * 7919 + (pos + i) * 104729) % (vocab - 2)));
            it.logits = engine::logits_mode::last;
            if (!seqs.pool().ensure_capacity(seqs.slot(it.sequence), pos + len))
                return make_error(error_code::out_of_range, "the benchmark's pool is too small");
            p.items.push_back(std::move(it));
        }
        return dev.execute(p, out);
    };
    TANDEM_RETURN_IF_ERROR(step(0, o.prompt));
    TANDEM_RETURN_IF_ERROR(step(o.prompt, 1));  // warm-up
    std::vector<double> ms;
    step_figures f;
    f.batch = batch;
    for (int i = 0; i < o.steps; ++i) {
        counter.bytes = 0;
        const auto t0 = std::chrono::steady_clock::now();
        TANDEM_RETURN_IF_ERROR(step(o.prompt + 1 + i, 1));
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        f.weight_mb = std::max(f.weight_mb, static_cast<double>(counter.bytes) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    f.median_ms = ms[ms.size() / 2];
    for (engine::sequence_id id : ids) dev.free_sequence(id);
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const bool more = i + 1 < argc;
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::printf("usage: bench_cuda_decode [--emulate] [--preset NAME] [--keep-models DIR] [--json PATH]\n"
                        "  the device forward's decode step time ÷ a roofline of its weight bytes over the device\n"
                        "  copy bandwidth (exit 77 without a GPU unless --emulate)\n");
            return 0;
        }
        if (std::strcmp(argv[i], "--emulate") == 0) o.emulate = true;
        else if (std::strcmp(argv[i], "--preset") == 0 && more) o.preset = argv[++i];
        else if (std::strcmp(argv[i], "--keep-models") == 0 && more) o.keep = argv[++i];
        else if (std::strcmp(argv[i], "--json") == 0 && more) o.json = argv[++i];
        else {
            std::fprintf(stderr, "bench_cuda_decode: unknown option or missing value: %s\n", argv[i]);
            return 2;
        }
    }
    if (o.preset.empty()) o.preset = o.emulate ? "flash-shape" : "flash-layer";
    o.batches = o.emulate ? std::vector<int>{1, 2} : std::vector<int>{1, 16};
    if (o.emulate) o.prompt = 16, o.steps = 2;
    double copy_gb = 0;
    if (!o.emulate) {
        gpu_info info = gpu_probe();
        if (info.device_count == 0) {
            std::printf("SKIP: %s\n", info.reason.c_str());
            return 77;
        }
        result<double> copy = cuda::measure_copy_gb_per_s(10);
        if (!copy) return std::fprintf(stderr, "copy bandwidth: %s\n", copy.error().message().c_str()), 1;
        copy_gb = *copy;
    }
    parity::generated_checkpoint ck(o.preset, o.keep);
    if (!ck.written()) return std::fprintf(stderr, "%s: %s\n", o.preset.c_str(), ck.written().message().c_str()), 1;
    auto cfg = model::load_model_config(ck.dir() + "/config.json");
    if (!cfg) return std::fprintf(stderr, "%s\n", cfg.error().message().c_str()), 1;
    auto layout = cache::layout_spec::create(*cfg, cache::layout_options{cache::kv_dtype::fp8, cache::index_k_dtype::fp4, 128});
    if (!layout) return std::fprintf(stderr, "%s\n", layout.error().message().c_str()), 1;

    result<std::unique_ptr<cuda::device_runtime>> inner =
        o.emulate ? result<std::unique_ptr<cuda::device_runtime>>(cuda::make_emulated_runtime()) : cuda::make_cuda_runtime();
    if (!inner) return std::fprintf(stderr, "%s\n", inner.error().message().c_str()), 1;
    auto counting = std::make_unique<cuda::weight_read_counter>(std::move(inner.value()));
    cuda::weight_read_counter* counter = counting.get();
    const cache::pool_options po{int64_t{1} << 30, 20};
    auto split = cache::plan_pool_split(*layout, po);
    if (!split) return std::fprintf(stderr, "%s\n", split.error().message().c_str()), 1;
    const int64_t bytes = cache::pool_geometry(*layout, split->num_pages, split->num_slots).total_bytes();
    auto slab = cuda::device_buffer::alloc(*counting, bytes, "benchmark pool slab");
    if (!slab) return std::fprintf(stderr, "%s\n", slab.error().message().c_str()), 1;
    auto pool = cache::page_pool::create_external(
        *layout, po,
        cache::external_arena{slab->get<std::byte>(), bytes,
                              [counter](std::byte* d, const std::byte* s, int64_t n) { return counter->upload(d, s, n); }});
    if (!pool) return std::fprintf(stderr, "%s\n", pool.error().message().c_str()), 1;
    auto seqs = std::make_shared<engine::pool_sequences>(std::move(pool.value()));
    auto dev = cuda::device_executor::create(std::move(counting), std::move(slab.value()), ck.dir(),
                                             model::numerics_mode::official, seqs);
    if (!dev) return std::fprintf(stderr, "%s\n", dev.error().message().c_str()), 1;

    std::printf("%s on %s (%s), official numerics, fp8 kv / fp4 index-K, prompt %d, %d timed steps%s\n", o.preset.c_str(),
                (*dev)->ops().describe().c_str(), ck.reused() ? "reused checkpoint" : "generated checkpoint", o.prompt,
                o.steps, o.emulate ? " — host emulation: a smoke test, not a figure" : "");
    if (!o.emulate) std::printf("device-to-device copy: %.1f GB/s (read + write)\n", copy_gb);
    std::printf("%6s %12s %14s %14s %10s\n", "batch", "step ms", "weights MB", "roofline ms", "ratio");
    std::string rows;
    int failures = 0;
    for (int b : o.batches) {
        result<step_figures> f = run_batch(**dev, *counter, *seqs, b, o);
        if (!f) {
            std::printf("batch %d: %s\n", b, f.error().message().c_str());
            ++failures;
            continue;
        }
        // The copy moves each byte twice (read + write); a step only reads its weights.
        f->roofline_ms = copy_gb > 0 ? f->weight_mb * 1e6 / (copy_gb * 1e9 / 2) * 1e3 : 0;
        const double ratio = f->roofline_ms > 0 ? f->median_ms / f->roofline_ms : 0;
        std::printf("%6d %12.3f %14.1f %14.4f %10.1f\n", b, f->median_ms, f->weight_mb, f->roofline_ms, ratio);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s{\"batch\":%d,\"step_ms\":%.4f,\"weight_mb\":%.2f,\"roofline_ms\":%.5f,\"ratio\":%.3f}",
                      rows.empty() ? "" : ",", b, f->median_ms, f->weight_mb, f->roofline_ms, ratio);
        rows += buf;
    }
    // K12 on the device; a row whose k-th boundary is an exact score tie takes the CPU's selection
    // on the host (its scores downloaded): how often that happened over the whole run.
    const auto topk = (*dev)->top_k_stats();
    std::printf("K12 top-k: %lld rows selected on the device, %lld of them fell back to the host selection (exact boundary tie)\n",
                static_cast<long long>(topk.rows), static_cast<long long>(topk.host_rows));
    if (!o.json.empty()) {
        if (std::FILE* fp = std::fopen(o.json.c_str(), "w")) {
            std::fprintf(fp,
                         "{\"preset\":\"%s\",\"emulated\":%s,\"copy_gb_per_s\":%.2f,\"decode\":[%s],"
                         "\"top_k_rows\":%lld,\"top_k_host_fallback_rows\":%lld}\n",
                         o.preset.c_str(), o.emulate ? "true" : "false", copy_gb, rows.c_str(),
                         static_cast<long long>(topk.rows), static_cast<long long>(topk.host_rows));
            std::fclose(fp);
        }
    }
    return failures ? 1 : 0;
}
