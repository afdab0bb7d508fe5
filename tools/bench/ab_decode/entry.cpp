// tools/bench/ab_decode/entry.cpp — one side of an in-process A/B (see ../ab_decode.sh): built into a
// shared object against one build's libtandem_impl.a, it loads a model with its own thread pool and
// page pool and runs batch-B decode steps on demand, as the engine does (forward_into).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "cache/layer_gate.h"
#include "cache/layout.h"
#include "cache/page_pool.h"
#include "model/model.h"
using namespace tandem;
namespace {
// One side's model, pool and B sequences, each decoding its own token stream from `context`.
struct state {
    std::unique_ptr<model::model> m;
    std::unique_ptr<cache::page_pool> pool;
    std::vector<std::vector<int32_t>> toks;
    std::vector<cache::slot_ref> slots;
    std::vector<model::forward_item> items;
    std::vector<float> logits;
    int64_t B = 0, context = 64, step = 0, cap = 0;
};
}
// Loads `dir` (cpu_matmul `mm`), prefills B sequences of `context` tokens; room for `cap` steps.
// prefill = 0 skips the prefill: the steps start at position `context` over the cache rows as the
// pool allocated them. A decode step's work depends on its position, not on the rows' values, so
// this times a step at a context too long to prefill here (its logits mean nothing).
extern "C" void* ab_init(const char* dir, const char* mm, int B, int cap, int context, int prefill) {
    auto* s = new state;
    s->B = B; s->cap = cap; s->context = context;
    auto opt = model::model_options_from("hf", 0, "huge", mm);
    auto m = model::model::load(dir, *opt);
    if (!m) { std::fprintf(stderr, "%s\n", m.error().message().c_str()); return nullptr; }
    s->m = std::move(*m);
    const auto& c = s->m->config();
    auto layout = cache::layout_spec::create(c, cache::layout_options{cache::kv_dtype::bf16, cache::index_k_dtype::bf16, 256});
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{1} << 30, B + 2});
    s->pool = std::move(*pool);
    auto token_at = [&](int64_t seq, int64_t i) { return int32_t(2 + (uint64_t(i) * 7919 + uint64_t(seq) * 104729) % uint64_t(c.vocab_size - 2)); };
    s->toks.resize(B);
    for (int64_t q = 0; q < B; ++q) {
        for (int64_t i = 0; i < s->context + cap; ++i) s->toks[q].push_back(token_at(q, i));
        cache::slot_ref sl = s->pool->alloc_sequence(1);
        s->pool->reset_sequence_state(sl);
        s->pool->ensure_capacity(sl, s->context + cap);
        s->slots.push_back(sl);
        s->items.push_back({std::span<const int32_t>(s->toks[q].data(), size_t(s->context)), 0, sl, model::logit_rows::last});
    }
    if (prefill) (void)s->m->forward_into(cache::layer_gate(*s->pool), s->items, s->logits);
    return s;
}
// Runs n more decode steps; returns their seconds.
extern "C" double ab_steps(void* h, int n) {
    auto* s = static_cast<state*>(h);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n && s->step < s->cap; ++i, ++s->step) {
        for (int64_t q = 0; q < s->B; ++q)
            s->items[q] = {std::span<const int32_t>(&s->toks[q][s->context + s->step], 1), s->context + s->step, s->slots[q], model::logit_rows::last};
        if (!s->m->forward_into(cache::layer_gate(*s->pool), s->items, s->logits)) return -1;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
