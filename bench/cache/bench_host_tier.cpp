// bench_host_tier — host-tier load bandwidth (host pages → pool pages on the copy thread, layer by
// layer behind the per-layer gate) against plain memcpy of the same bytes, measured in the same run.
//
// Setup: a page pool and a host tier of the same number of pages, laid out for a preset (default
// `small`) with the given dtypes; every pool page is filled, sealed and written through to host.
// Load round: fresh pool pages are allocated and host_tier::load() copies every page back (all
// layers, all kinds); the clock runs from queueing to the last layer's gate opening, as the
// forward pass would see it. Baseline round: memcpy of the same bytes between two buffers of the
// same sizes, in the same per-(layer, kind) page chunks (one thread, like the copy thread), and
// one single big memcpy. Best of --rounds alternating rounds; reported: GB/s of each and
// load ÷ memcpy (goal >= 0.8; prefix-cache.md §5.6).
//
//   build/bench/cache/bench_host_tier [--preset small] [--mib 256] [--page-size 256]
//                                     [--kv bf16] [--index-k fp8] [--rounds 5]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/host_tier.h"
#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "model/make_model.h"

using namespace tandem;
using namespace tandem::cache;

namespace {

template <typename T>
T must(result<T> r, const char* what) {
    if (!r) {
        fmt::print(stderr, "bench_host_tier: {}: {}\n", what, r.error().message());
        std::exit(1);
    }
    return std::move(*r);
}

const char* k_usage =
    "usage: bench_host_tier [--preset small] [--mib 256] [--page-size 256] [--kv bf16] [--index-k fp8] [--rounds 5]\n"
    "  host-tier load (host pages -> pool, layer by layer behind the gate) against memcpy of the same bytes\n";

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string preset = "small", kv = "bf16", idx = "fp8";  // small: fp8 KV needs a wider head
    int64_t mib = 256, page_size = 256, rounds = 5;
    for (int i = 1; i < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--help" || k == "-h") {
            fmt::print("{}", k_usage);
            return 0;
        }
        if (i + 1 >= argc) {
            fmt::print(stderr, "bench_host_tier: {} needs a value\n{}", k, k_usage);
            return 2;
        }
        const std::string v = argv[i + 1];
        if (k == "--preset") preset = v;
        else if (k == "--mib") mib = std::stoll(v);
        else if (k == "--page-size") page_size = std::stoll(v);
        else if (k == "--kv") kv = v;
        else if (k == "--index-k") idx = v;
        else if (k == "--rounds") rounds = std::stoll(v);
        else {
            fmt::print(stderr, "bench_host_tier: unknown option {}\n{}", k, k_usage);
            return 2;
        }
    }
    const model::model_config cfg = must(model::preset_config(preset), "preset");
    layout_options lo;
    lo.kv = must(parse_kv_dtype(kv), "--kv");
    lo.index_k = must(parse_index_k_dtype(idx), "--index-k");
    lo.page_size = page_size;
    const layout_spec layout = must(layout_spec::create(cfg, lo), "layout");
    const int64_t page_bytes = layout.page_group_bytes();
    const int64_t pages = std::max<int64_t>(1, (mib << 20) / page_bytes);
    const int64_t slack = int64_t(layout.buffers().size() + 1) * pool_geometry::k_region_alignment;
    // Two sets of pool pages (the stored originals and the load destinations) + one slot.
    const int64_t pool_bytes = pool_geometry(layout, 2 * pages, 1).total_bytes() + slack;
    auto pool = must(page_pool::create(layout, {pool_bytes, 1}), "pool");
    auto host = must(host_tier::create(*pool, {pages * page_bytes + slack, nullptr, {}}), "host tier");
    fmt::print("layout ({} preset): {}\n", preset, layout.describe());
    fmt::print("{} pages of {} B = {:.1f} MiB per round ({} buffers per page)\n", pages, page_bytes,
               double(pages * page_bytes) / (1 << 20), layout.buffers().size());

    std::mt19937_64 rng(1);
    std::vector<int32_t> host_pages;
    for (int64_t p = 0; p < pages; ++p) {
        page_ref ref = pool->alloc_page(1);
        for (size_t b = 0; b < layout.buffers().size(); ++b) {
            std::byte* dst = pool->page_bytes_for_write(ref, int32_t(b));
            for (int64_t i = 0; i < layout.buffers()[b].bytes_per_page; i += 8) dst[i] = std::byte(rng());
        }
        pool->seal_page(ref);
        const int32_t hp = host->alloc_page();
        host->store(ref, hp);
        host_pages.push_back(hp);
    }
    host->drain();

    // Baseline buffers with the same chunking: per page, one chunk per (layer, kind) buffer.
    std::vector<std::byte> src(size_t(pages * page_bytes)), dst(size_t(pages * page_bytes));
    std::memset(src.data(), 1, src.size());
    std::memset(dst.data(), 2, dst.size());

    const slot_ref slot = pool->alloc_sequence(2);
    double best_load = 1e30, best_chunked = 1e30, best_big = 1e30;
    for (int64_t r = 0; r < rounds; ++r) {
        // Load: fresh destination pages, everything back through the gate.
        std::vector<page_load> loads;
        for (int64_t p = 0; p < pages; ++p) loads.push_back({host_pages[size_t(p)], pool->alloc_page(2)});
        auto t0 = std::chrono::steady_clock::now();
        auto ticket = host->load(loads, slot, nullptr);
        const layer_gate gate(*pool, {ticket});
        for (int32_t l = 0; l < int32_t(layout.num_layers()); ++l) must(gate.wait(l), "gate");
        best_load = std::min(best_load, seconds_since(t0));
        for (const page_load& pl : loads) pool->release_page(pl.device);

        t0 = std::chrono::steady_clock::now();
        int64_t off = 0;
        for (const buffer_layout& b : layout.buffers()) {
            for (int64_t p = 0; p < pages; ++p, off += b.bytes_per_page)
                std::memcpy(dst.data() + off, src.data() + off, size_t(b.bytes_per_page));
        }
        best_chunked = std::min(best_chunked, seconds_since(t0));

        t0 = std::chrono::steady_clock::now();
        std::memcpy(dst.data(), src.data(), src.size());
        best_big = std::min(best_big, seconds_since(t0));
    }
    const double bytes = double(pages * page_bytes);
    fmt::print("host-tier load:        {:.3f} s  {:.2f} GB/s (queue to last layer's gate)\n", best_load,
               bytes / best_load / 1e9);
    fmt::print("memcpy, same chunks:   {:.3f} s  {:.2f} GB/s\n", best_chunked, bytes / best_chunked / 1e9);
    fmt::print("memcpy, one call:      {:.3f} s  {:.2f} GB/s\n", best_big, bytes / best_big / 1e9);
    fmt::print("ratio load / memcpy (same chunks): {:.3f}   (goal >= 0.8)\n", best_chunked / best_load);
    fmt::print("ratio load / memcpy (one call):    {:.3f}\n", best_big / best_load);
    return 0;
}
