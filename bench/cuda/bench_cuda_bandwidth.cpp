// bench/cuda/bench_cuda_bandwidth.cpp — The GPU check's micro-benchmark: the phase-1 linear
// kernel's weight bandwidth on decode-shaped bf16 GEMMs (batch 1..32) as a RATIO of the device-
// to-device copy bandwidth measured in the same run (the HBM ceiling). Phase 2's exit criterion
// is ≥ 0.8 at batch 1–32; phase 1 (one thread per output, the CPU's K order) is expected far
// below that: this number is the baseline phase 2 improves on.
// The decode step time of the whole forward is bench_cuda_decode's.
// Without a GPU: SKIP (exit 77). Usage: bench_cuda_bandwidth [--json PATH]
#include <cstdio>
#include <string>
#include <vector>

#include "core/gpu_probe.h"
#include "cuda/host/cuda_ops.h"

using namespace tandem;

int main(int argc, char** argv) {
    std::string json;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (k == "--help" || k == "-h") {
            std::printf("usage: bench_cuda_bandwidth [--json PATH]\n"
                        "  the linear kernel's weight bandwidth on decode-shaped GEMMs ÷ the device copy bandwidth\n"
                        "  (exit 77 without a GPU)\n");
            return 0;
        }
        if (k == "--json" && i + 1 < argc) {
            json = argv[++i];
            continue;
        }
        std::fprintf(stderr, "bench_cuda_bandwidth: unknown option or missing value: %s\n", k.c_str());
        return 2;
    }
    gpu_info info = gpu_probe();
    if (info.device_count == 0) {
        std::printf("SKIP: %s\n", info.reason.c_str());
        return 77;
    }
    struct shape { int64_t out, in; const char* what; };
    // Decode-shaped weights at V4-Flash width (d = 4096): a low-rank projection, an expert's down
    // projection and a slice of the lm head; 8 to 134 MB each, past the 60 MB L2 for the large ones.
    const shape shapes[] = {{1024, 4096, "q_a 1024x4096"}, {4096, 2048, "expert down 4096x2048"}, {16384, 4096, "head slice 16384x4096"}};
    const int64_t batches[] = {1, 8, 32};
    std::string rows;
    int failures = 0;
    std::printf("%-24s %6s %12s %12s %10s %8s\n", "shape", "batch", "copy GB/s", "linear GB/s", "linear ms", "ratio");
    for (const shape& s : shapes)
        for (int64_t b : batches) {
            result<cuda::bandwidth_result> r = cuda::measure_bandwidth(s.out, s.in, b, 10);
            if (!r) {
                std::printf("%s batch %lld: %s\n", s.what, static_cast<long long>(b), r.error().message().c_str());
                ++failures;
                continue;
            }
            const double ratio = r->linear_gb_per_s / r->copy_gb_per_s;
            std::printf("%-24s %6lld %12.1f %12.1f %10.3f %8.4f\n", s.what, static_cast<long long>(b), r->copy_gb_per_s,
                        r->linear_gb_per_s, r->linear_ms, ratio);
            char buf[320];
            std::snprintf(buf, sizeof buf,
                          "%s{\"shape\":\"%s\",\"batch\":%lld,\"copy_gb_per_s\":%.2f,\"linear_gb_per_s\":%.2f,"
                          "\"linear_ms\":%.4f,\"ratio_to_copy\":%.5f}",
                          rows.empty() ? "" : ",", s.what, static_cast<long long>(b), r->copy_gb_per_s,
                          r->linear_gb_per_s, r->linear_ms, ratio);
            rows += buf;
        }
    if (!json.empty()) {
        if (std::FILE* f = std::fopen(json.c_str(), "w")) {
            std::fprintf(f, "{\"gpu\":\"%s\",\"linear_vs_copy\":[%s]}\n", info.devices.c_str(), rows.c_str());
            std::fclose(f);
        }
    }
    return failures ? 1 : 0;
}
