// bench/model/model_logits.cpp — dev tool (not a benchmark): all-position logits of a checkpoint
// for given token ids, for comparisons against reference implementations
// (tools/model/check_hf_random.py).
//
//   build/bench/model/model_logits --model DIR --tokens a,b,c --out logits.f32
//       [--numerics hf|official] [--chunk N] [--threads N]
//
// Writes float32 [n_tokens, vocab] row-major. --chunk feeds the prompt in chunks of N tokens
// through the cache (default: one call).
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "model/model.h"

int main(int argc, char** argv) {
    namespace model = tandem::model;
    namespace cache = tandem::cache;
    std::string dir, out, tokens_arg, numerics = "hf";
    int64_t chunk = 0;
    int threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") dir = v;
        else if (k == "--out") out = v;
        else if (k == "--tokens") tokens_arg = v;
        else if (k == "--numerics") numerics = v;
        else if (k == "--chunk") chunk = std::atoll(v.c_str());
        else if (k == "--threads") threads = std::atoi(v.c_str());
        else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
    }
    std::vector<int32_t> tokens;
    std::stringstream ss(tokens_arg);
    for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::atoi(t.c_str()));
    if (dir.empty() || out.empty() || tokens.empty()) {
        std::fprintf(stderr, "usage: model_logits --model DIR --tokens a,b,c --out FILE\n");
        return 2;
    }
    model::model_options opt{numerics == "official" ? model::numerics_mode::official : model::numerics_mode::hf, threads};
    auto m = model::model::load(dir, opt);
    if (!m) { std::fprintf(stderr, "%s\n", m.error().message().c_str()); return 1; }
    const auto& c = (*m)->config();
    const int64_t page = std::lcm(std::lcm(int64_t{128}, c.compress_rate_csa), c.compress_rate_hca);
    auto layout = cache::layout_spec::create(c, cache::layout_options{cache::kv_dtype::fp32, cache::index_k_dtype::fp32, page});
    if (!layout) { std::fprintf(stderr, "%s\n", layout.error().message().c_str()); return 1; }
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{1} << 30, 1});
    if (!pool) { std::fprintf(stderr, "%s\n", pool.error().message().c_str()); return 1; }
    cache::slot_ref slot = (*pool)->alloc_sequence(1);
    (*pool)->reset_sequence_state(slot);
    if (!(*pool)->ensure_capacity(slot, int64_t(tokens.size()))) { std::fprintf(stderr, "pool too small\n"); return 1; }
    if (chunk <= 0) chunk = int64_t(tokens.size());
    std::FILE* f = std::fopen(out.c_str(), "wb");
    if (!f) return 1;
    for (int64_t at = 0; at < int64_t(tokens.size()); at += chunk) {
        const int64_t n = std::min<int64_t>(chunk, int64_t(tokens.size()) - at);
        model::forward_item it{std::span<const int32_t>(&tokens[size_t(at)], size_t(n)), at, slot, model::logit_rows::all};
        auto r = (*m)->forward(**pool, std::span<const model::forward_item>(&it, 1));
        if (!r) { std::fprintf(stderr, "%s\n", r.error().message().c_str()); return 1; }
        std::fwrite(r->logits[0].data(), sizeof(float), r->logits[0].size(), f);
    }
    return std::fclose(f) == 0 ? 0 : 1;
}
