// A steady decode step allocates nothing but its output (issue 12: no per-step allocations in
// the block loop, attention, MoE, compressors). This file replaces the global operator new of
// the unit-test binary with one that counts while a test switches counting on; it forwards to
// malloc (mimalloc in release builds), so every other test sees the usual allocator.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

#include "model_test_util.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) n = 1;
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}

}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
// The nothrow forms too: left to the runtime, they would pair its allocation with the free()
// above (ASan reports that as an alloc-dealloc mismatch, e.g. simdjson's new (std::nothrow) T[]).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try { return counted_alloc(n, 0); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    try { return counted_alloc(n, 0); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try { return counted_alloc(n, static_cast<std::size_t>(a)); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try { return counted_alloc(n, static_cast<std::size_t>(a)); } catch (...) { return nullptr; }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

// Two sequences: a batched prefill of `context` tokens, then `steps` batched decode steps.
// Returns the most allocations any decode step made, each step's ensure_capacity excluded (page
// bookkeeping belongs to the pool, not the forward pass).
int64_t worst_decode_step(session& ss, int64_t context, int64_t steps, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int64_t vocab = ss.m->config().vocab_size;
    std::vector<std::vector<int32_t>> toks(2);
    for (auto& t : toks)
        for (int64_t i = 0; i < context + steps; ++i) t.push_back(static_cast<int32_t>(2 + rng() % uint64_t(vocab - 2)));
    const cache::slot_ref s[2] = {ss.new_sequence(), ss.new_sequence()};
    std::vector<forward_item> items;
    for (int i = 0; i < 2; ++i) items.push_back({std::span<const int32_t>(toks[i].data(), size_t(context)), 0, s[i], logit_rows::last});
    REQUIRE(ss.forward(items).is_ok());
    int64_t worst = 0;
    for (int64_t step = 0; step < steps; ++step) {
        for (int i = 0; i < 2; ++i) {
            items[size_t(i)] = {std::span<const int32_t>(&toks[i][size_t(context + step)], 1), context + step, s[i], logit_rows::last};
            REQUIRE(ss.pool->ensure_capacity(s[i], context + step + 1));
        }
        g_allocations = 0;
        g_counting = true;
        auto out = ss.m->forward(*ss.pool, items);
        g_counting = false;
        REQUIRE_MESSAGE(out.is_ok(), out.error().message());
        worst = std::max<int64_t>(worst, g_allocations.load());
    }
    for (auto slot : s) ss.pool->free_sequence(slot);
    return worst;
}

}  // namespace

TEST_CASE("model: a steady decode step allocates only its output") {
    // The counter works: a vector allocates.
    g_allocations = 0;
    g_counting = true;
    auto* probe = new std::vector<int>(100);
    g_counting = false;
    delete probe;
    REQUIRE(g_allocations.load() == 2);

    struct variant {
        const char* preset;
        cache::kv_dtype kv;
        cache::index_k_dtype ik;
        numerics_mode numerics;
    };
    // Stored fp32 weights with bf16 cache rows; FP8 + FP4 weights under "official" (activation
    // quantization copies, FP8 KV, FP4 index rows).
    for (const variant& v : {variant{"tiny", cache::kv_dtype::bf16, cache::index_k_dtype::bf16, numerics_mode::hf},
                             variant{"tiny-fp8", cache::kv_dtype::fp8, cache::index_k_dtype::fp4,
                                     numerics_mode::official}}) {
        CAPTURE(v.preset);
        temp_dir dir("step_alloc");
        make_checkpoint(v.preset, 5, dir.str());
        // One thread: the pool runs every piece on this thread, so its thread-local buffers are
        // warmed deterministically (with workers, which thread grows a buffer first is timing).
        session ss(dir.str(), 1, v.kv, v.ik, v.numerics);
        // Warm-up to the same lengths (buffers grow geometrically until the longest context),
        // then the same shape again: every step of the second run must reuse what the first grew.
        worst_decode_step(ss, 40, 12, 1);
        const int64_t worst = worst_decode_step(ss, 40, 12, 2);
        // The output: the logits list and one vector per sequence.
        CHECK_MESSAGE(worst <= 3, "a steady decode step allocated ", worst, " times (output needs 3)");
        CHECK(worst >= 1);  // the counter sees the step: its output does allocate
    }
}
