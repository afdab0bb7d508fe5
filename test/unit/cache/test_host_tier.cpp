// The host tier and the layer gate (prefix-cache.md §5.6, §5.7, §9 T5–T7, host parts):
//   * one source of truth: the kinds a load copies per layer are the kinds LayoutSpec lists for
//     that layer, which are the kinds the layer_view exposes — every layer type, every dtype;
//   * a page written through and loaded back is byte-equal per buffer (every layer, every kind),
//     and a snapshot restored by the layer-by-layer load equals restore_snapshot's slot bytes;
//   * the gate: wait(l) returns only after layer l landed (a delayed kind holds the whole layer);
//     with the test-only skip-gate switch the sentinel check fires, naming the layer and kind;
//   * the tree with a host tier: device eviction keeps host copies and match hands them out;
//     a full host tier drops host-only leaves, and matches clamp to whole pages above them.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <thread>

#include "cache/host_tier.h"
#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "cache/prefix_tree.h"
#include "cache/snapshot.h"
#include "core/liveness.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

std::unique_ptr<host_tier> make_host(page_pool& pool, int64_t pages, host_tier_test_hooks hooks = {},
                                     std::shared_ptr<heartbeat> beat = nullptr) {
    const int64_t bytes = pages * pool.layout().page_group_bytes() +
                          int64_t(pool.layout().buffers().size()) * pool_geometry::k_region_alignment;
    auto r = host_tier::create(pool, {bytes, std::move(beat), std::move(hooks)});
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    REQUIRE((*r)->geometry().num_pages() == pages);
    return std::move(*r);
}

void fill_random(page_pool& pool, page_ref p, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t b = 0; b < pool.layout().buffers().size(); ++b) {
        std::byte* dst = pool.page_bytes_for_write(p, int32_t(b));
        REQUIRE(dst != nullptr);
        for (int64_t i = 0; i < pool.layout().buffers()[b].bytes_per_page; ++i) dst[i] = std::byte(rng());
    }
}

bool page_equal(const page_pool& pool, int32_t a, int32_t b, int32_t buffer) {
    return std::memcmp(pool.page_bytes(a, buffer), pool.page_bytes(b, buffer),
                       size_t(pool.layout().buffers()[size_t(buffer)].bytes_per_page)) == 0;
}

// A slot holding `tokens` tokens of random state (window rows and compressor rings).
void fill_slot(page_pool& pool, slot_ref s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::byte* bytes = pool.slot_bytes_for_write(s);
    REQUIRE(bytes != nullptr);
    for (int64_t i = 0; i < pool.geometry().slot_stride(); ++i) bytes[i] = std::byte(rng() & 0x7f);
}

// One random page stored in the host tier and a fresh sequence with one page to load it into.
struct staged_page {
    page_ref original;             // the pool page written, sealed and stored
    slot_ref dst;                  // the sequence the load fills
    std::vector<page_load> loads;  // the one page: host copy → the sequence's page
};

staged_page stage_one_page(page_pool& pool, host_tier& host) {
    staged_page st;
    st.original = pool.alloc_page(1);
    fill_random(pool, st.original, 5);
    pool.seal_page(st.original);
    const int32_t hp = host.alloc_page();
    host.store(st.original, hp);
    host.drain();
    st.dst = pool.alloc_sequence(2);
    pool.reset_sequence_state(st.dst);
    const page_ref p = pool.alloc_page(2);
    pool.append_page(st.dst, p);
    st.loads = {{hp, p}};
    return st;
}

std::vector<int32_t> tokens_of(int64_t n, int32_t salt) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7919 + salt) % 5000));
    return t;
}

}  // namespace

TEST_CASE("host tier: a load copies per layer exactly the kinds LayoutSpec lists, which the layer view exposes") {
    for (const char* file : {"tiny-ci-native.json", "deepseek-v4-flash.json"}) {
        const model::model_config m = load_model(file);
        for (kv_dtype kv : {kv_dtype::fp8, kv_dtype::bf16}) {
            for (index_k_dtype idx : {index_k_dtype::fp8, index_k_dtype::bf16, index_k_dtype::fp4}) {
                CAPTURE(file);
                CAPTURE(kv_dtype_name(kv));
                CAPTURE(index_k_dtype_name(idx));
                const layout_spec l = make_layout(m, kv, idx, 256);
                auto pool = make_pool(l, 2, 1);
                auto host = make_host(*pool, 1);
                const slot_ref s = pool->alloc_sequence(1);
                const page_ref p = pool->alloc_page(1);
                pool->append_page(s, p);
                const load_plan plan = host->plan_load(std::vector<page_load>{{0, p}}, s, nullptr);
                const layer_gate gate(*pool);
                REQUIRE(plan.buffers_per_layer.size() == l.layers().size());
                for (const layer_layout& ly : l.layers()) {
                    CAPTURE(ly.layer);
                    const auto view = gate.wait(ly.layer);
                    REQUIRE(view);
                    CHECK(plan.buffers_per_layer[size_t(ly.layer)] == view->kinds().buffers);
                    CHECK(plan.states_per_layer[size_t(ly.layer)] == view->kinds().states);
                    CHECK(view->kinds().buffers == ly.buffers);
                    // Every history buffer of the layer is one copy of the page.
                    CHECK(plan.per_layer[size_t(ly.layer)].size() == ly.buffers.size());
                }
                pool->free_sequence(s);
            }
        }
    }
}

TEST_CASE("host tier: T6 a page written through and loaded back is byte-equal in every layer and kind") {
    for (index_k_dtype idx : {index_k_dtype::fp8, index_k_dtype::bf16, index_k_dtype::fp4}) {
        CAPTURE(index_k_dtype_name(idx));
        pool_fixture f(kv_dtype::fp8, idx);
        auto host = make_host(*f.pool, 3);
        std::vector<page_ref> originals;
        std::vector<int32_t> host_pages;
        for (int i = 0; i < 3; ++i) {
            page_ref p = f.pool->alloc_page(1);
            fill_random(*f.pool, p, 100 + uint64_t(i));
            f.pool->seal_page(p);
            const int32_t hp = host->alloc_page();
            REQUIRE(hp >= 0);
            host->store(p, hp);
            originals.push_back(p);
            host_pages.push_back(hp);
        }
        CHECK(host->alloc_page() == -1);  // full: exactly the pages the budget holds
        host->drain();
        for (int32_t hp : host_pages) CHECK(host->present(hp));
        // A snapshot of a slot with random state, restored by the load into a fresh slot.
        const slot_ref src = f.pool->alloc_sequence(1);
        fill_slot(*f.pool, src, 7);
        const auto toks = tokens_of(2 * k_page, 3);
        auto snap = std::make_shared<const boundary_snapshot>(capture_snapshot(*f.pool, src, toks, 9));
        const slot_ref dst = f.pool->alloc_sequence(2);
        f.pool->reset_sequence_state(dst);
        std::vector<page_load> loads;
        for (int i = 0; i < 3; ++i) {
            page_ref p = f.pool->alloc_page(2);
            f.pool->append_page(dst, p);
            loads.push_back({host_pages[size_t(i)], p});
        }
        auto ticket = host->load(loads, dst, snap);
        const layer_gate gate(*f.pool, {ticket});
        for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) REQUIRE(gate.wait(l));
        CHECK(ticket->complete());
        for (int i = 0; i < 3; ++i)
            for (size_t b = 0; b < f.layout.buffers().size(); ++b) {
                CAPTURE(b);
                CHECK(page_equal(*f.pool, originals[size_t(i)].page, loads[size_t(i)].device.page, int32_t(b)));
            }
        // The same snapshot restored synchronously: the slot bytes must be identical.
        const slot_ref ref = f.pool->alloc_sequence(3);
        f.pool->reset_sequence_state(ref);
        REQUIRE(restore_snapshot(*f.pool, ref, *snap).is_ok());
        CHECK(std::memcmp(f.pool->slot_bytes(dst.slot), f.pool->slot_bytes(ref.slot),
                          size_t(f.pool->geometry().slot_stride())) == 0);
        CHECK(host->stats().loaded_pages == 3);
        CHECK(host->stats().stores == 3);
        CHECK(host->load_latency().count == 1);
        for (int32_t hp : host_pages) host->free_page(hp);
        CHECK(host->stats().bytes_used == 0);
    }
}

TEST_CASE("host tier: T5 the gate holds a layer until its delayed kind landed; skip-gate makes the sentinel fire") {
    pool_fixture f(kv_dtype::fp8, index_k_dtype::fp8);
    int32_t csa = -1;
    for (const layer_layout& ly : f.layout.layers())
        if (csa < 0 && f.layout.buffer_index(ly.layer, buffer_kind::index_k) >= 0) csa = ly.layer;
    REQUIRE(csa >= 0);
    SUBCASE("index-K delayed, gate on: the layer's view comes only after it landed") {
        auto host = make_host(*f.pool, 1, {"index_k", csa, 150, true, false, false});
        const staged_page st = stage_one_page(*f.pool, *host);
        auto ticket = host->load(st.loads, st.dst, nullptr);
        const layer_gate gate(*f.pool, {ticket});
        for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) {
            auto view = gate.wait(l);
            REQUIRE_MESSAGE(view, view.error().message());
            // What the view reads is what was stored, index-K included.
            const int32_t b = f.layout.buffer_index(l, buffer_kind::index_k);
            if (b >= 0) CHECK(page_equal(*f.pool, st.original.page, st.loads[0].device.page, b));
        }
    }
    SUBCASE("skip-gate: the sentinel check fires on the delayed layer, index-K included") {
        // The copy thread stops before the first copy of layer `csa`: the skipped gate then reads
        // only sentinels this thread wrote. (Delaying index-K alone would have the check read the
        // layer's other kinds while the copy thread writes them, a race TSan rightly reports.)
        auto host = make_host(*f.pool, 1, {"", csa, 60000, true, true, false});
        const staged_page st = stage_one_page(*f.pool, *host);
        auto ticket = host->load(st.loads, st.dst, nullptr);
        const layer_gate gate(*f.pool, {ticket});
        for (int32_t l = 0; l < csa; ++l) {  // earlier layers land; waited on the ticket itself
            REQUIRE(ticket->wait_layer(l, monotonic_ms() + 60000).is_ok());
            CHECK(gate.wait(l).is_ok());
        }
        auto view = gate.wait(csa);
        REQUIRE_FALSE(view);
        CHECK(view.error().message().find("sentinel") != std::string::npos);
        CHECK(view.error().message().find("index_k") != std::string::npos);
        CHECK(view.error().message().find("layer " + std::to_string(csa)) != std::string::npos);
        ticket->cancel();  // wakes the copy thread from its 60 s delay: no further writes
        CHECK_FALSE(ticket->complete());
    }
    SUBCASE("a cancelled load fails its other waiters at once instead of letting them read") {
        auto host = make_host(*f.pool, 1, {"index_k", csa, 60000, false, false, false});
        const staged_page st = stage_one_page(*f.pool, *host);
        auto ticket = host->load(st.loads, st.dst, nullptr);
        const layer_gate waiter(*f.pool, {ticket}, 600000);
        std::thread canceller([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            ticket->cancel();
        });
        const auto after = waiter.wait(csa);
        canceller.join();
        REQUIRE_FALSE(after);
        CHECK(after.error().message().find("cancelled") != std::string::npos);
    }
    SUBCASE("a stalled copy thread is reported: pending work, no progress") {
        auto beat = std::make_shared<heartbeat>("host-tier copy thread");
        auto host = make_host(*f.pool, 1, {"", -1, 60000, false, false, false}, beat);
        const staged_page st = stage_one_page(*f.pool, *host);
        auto ticket = host->load(st.loads, st.dst, nullptr);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        const auto problem = beat->problem(monotonic_ms(), 10);
        REQUIRE(problem.has_value());
        ticket->cancel();
        host->drain();
        CHECK_FALSE(beat->problem(monotonic_ms(), 10).has_value());  // idle again
    }
}

// CI found this (pd prefill, bf16 index-K): a batch waits on the loads of other requests whose
// pages it shares; one such request ended and its slot was reused by a newer load, whose sentinel
// the gate then blamed on the old, landed load ("layer 0 window read before the load landed").
// A destination freed or reused since its load is no longer that load's to check.
TEST_CASE("host tier: a landed load whose slot and pages were reused is not blamed for a newer load's sentinel") {
    pool_fixture f(kv_dtype::fp8, index_k_dtype::bf16);
    auto host = make_host(*f.pool, 1, {"", -1, 0, true, false, false});  // sentinel on
    page_ref orig = f.pool->alloc_page(1);
    fill_random(*f.pool, orig, 11);
    f.pool->seal_page(orig);
    const int32_t hp = host->alloc_page();
    host->store(orig, hp);
    host->drain();
    const slot_ref src = f.pool->alloc_sequence(1);
    fill_slot(*f.pool, src, 12);
    auto snap = std::make_shared<const boundary_snapshot>(
        capture_snapshot(*f.pool, src, tokens_of(k_page, 5), 9));
    auto load_into_fresh_slot = [&](owner_id owner) {
        const slot_ref dst = f.pool->alloc_sequence(owner);
        f.pool->reset_sequence_state(dst);
        const page_ref p = f.pool->alloc_page(owner);
        f.pool->append_page(dst, p);
        const std::vector<page_load> loads = {{hp, p}};
        return std::pair{dst, host->load(loads, dst, snap)};
    };
    auto [first_slot, first] = load_into_fresh_slot(2);
    const layer_gate first_gate(*f.pool, {first});
    for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) REQUIRE(first_gate.wait(l));
    f.pool->free_sequence(first_slot);  // the first request ended: its slot and page go back

    // The next load reuses them and stalls on layer 0 with its destinations sentinel-filled.
    host->set_test_hooks({"", 0, 60000, true, false, false});
    auto [second_slot, second] = load_into_fresh_slot(3);
    CHECK(second_slot.slot == first_slot.slot);  // the same bytes, a new epoch
    CHECK_FALSE(f.pool->is_current(first_slot));
    // A batch still waiting on the first (landed) load reads none of the reused bytes.
    const layer_gate sharer(*f.pool, {first});
    for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) {
        auto view = sharer.wait(l);
        CHECK_MESSAGE(view.is_ok(), (view.is_ok() ? std::string() : view.error().message()));
    }
    // The second load's own gate, skipped, still blames the second load (the check is not off).
    host->set_test_hooks({"", 0, 60000, true, true, false});
    auto [third_slot, third] = load_into_fresh_slot(4);
    const layer_gate skipper(*f.pool, {third});
    auto view = skipper.wait(0);
    REQUIRE_FALSE(view);
    CHECK(view.error().message().find("sentinel") != std::string::npos);
    second->cancel();
    third->cancel();
}

TEST_CASE("host tier: the tree keeps host copies on device eviction, loads hand them out, a full host tier clamps to whole pages") {
    pool_fixture f(kv_dtype::bf16, index_k_dtype::fp4, 8);
    auto host = make_host(*f.pool, 4);
    prefix_tree tree(*f.pool, 42, {0}, host.get());
    const auto t = tokens_of(3 * k_page + 10, 1);
    slot_ref s = f.pool->alloc_sequence(1);
    for (int i = 0; i < 3; ++i) {
        page_ref p = f.pool->alloc_page(1);
        fill_random(*f.pool, p, 30 + uint64_t(i));
        f.pool->append_page(s, p);
    }
    auto snap_at = [&](int64_t pages) {
        boundary_snapshot b;
        b.header.boundary = pages * k_page;
        b.payload.resize(100);
        return b;
    };
    const std::span<const int32_t> all(t);
    tree.insert(all.first(k_page), f.pool->page_table(s), snap_at(1));
    tree.insert(all.first(3 * k_page), f.pool->page_table(s), snap_at(3));
    std::vector<page_ref> computed(f.pool->page_table(s).begin(), f.pool->page_table(s).end());
    tree.check_integrity();
    CHECK(tree.stats().host_pages_held == 3);
    f.pool->free_sequence(s);
    host->drain();  // the fence: device copies go only after their store landed
    CHECK(tree.evictable_pages() == 3);
    CHECK(tree.evict_pages(3) == 3);
    tree.check_integrity();
    CHECK(tree.stats().pages_held == 0);
    CHECK(tree.stats().evicted_to_host == 3);
    CHECK(f.pool->stats().pages_free == f.pool->stats().pages_total);

    prefix_tree::match_result m = tree.match(t);
    REQUIRE(m.tokens == 3 * k_page);
    for (size_t i = 0; i < 3; ++i) {
        CHECK_FALSE(m.pages[i].valid());
        CHECK(m.host_pages[i] >= 0);
    }
    // Load them back the way prefix_cache::attach does, and compare with what was computed.
    tree.lock(m.at);
    slot_ref d = f.pool->alloc_sequence(2);
    f.pool->reset_sequence_state(d);
    std::vector<page_load> loads;
    for (size_t i = 0; i < 3; ++i) {
        page_ref p = f.pool->alloc_page(2);
        f.pool->append_page(d, p);
        loads.push_back({m.host_pages[i], p});
    }
    auto ticket = host->load(loads, d, nullptr);
    for (size_t i = 0; i < 3; ++i) tree.adopt_loading_page(m.path[i], loads[i].device, ticket);
    // A second matcher before the load landed gets the device pages AND the ticket to wait on.
    prefix_tree::match_result m2 = tree.match(t);
    CHECK((m2.loading.empty() || m2.loading.front() == ticket));
    const layer_gate gate(*f.pool, {ticket});
    for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) REQUIRE(gate.wait(l));
    tree.check_integrity();
    CHECK(tree.stats().pages_held == 3);
    // The refilled pages hold what the original computation wrote (the pool reused the freed
    // pages, so compare against a fresh fill with the same seeds).
    for (size_t i = 0; i < 3; ++i) {
        page_ref probe = f.pool->alloc_page(9);
        fill_random(*f.pool, probe, 30 + uint64_t(i));
        for (size_t b = 0; b < f.layout.buffers().size(); ++b)
            CHECK(page_equal(*f.pool, probe.page, loads[i].device.page, int32_t(b)));
        f.pool->release_page(probe);
    }
    tree.unlock(m.at);
    f.pool->free_sequence(d);

    // Everything back on host only; then a new branch needs a host page: the host tier (4 pages,
    // 3 used + 1 free) takes the free one, the next needs an eviction of a host-only leaf — the
    // deepest page of the first path — and the match clamps to the snapshot above it.
    host->drain();
    CHECK(tree.evict_pages(3) == 3);
    auto other = tokens_of(2 * k_page, 99);
    slot_ref o = f.pool->alloc_sequence(3);
    for (int i = 0; i < 2; ++i) {
        page_ref p = f.pool->alloc_page(3);
        fill_random(*f.pool, p, 70 + uint64_t(i));
        f.pool->append_page(o, p);
    }
    tree.insert(other, f.pool->page_table(o), std::nullopt);
    tree.check_integrity();
    INFO("host used ", host->stats().pages_used, " held ", tree.stats().host_pages_held, " skipped ",
         tree.stats().host_store_skipped);
    CHECK(tree.stats().host_evictions >= 1);
    const prefix_tree::match_result clamped = tree.match(t);
    CHECK(clamped.tokens == k_page);  // page 3 (and its snapshot) went with its host copy
    CHECK(clamped.pages.size() == 1);
    f.pool->free_sequence(o);
    host->drain();
    CHECK(tree.flush() > 0);
    tree.check_integrity();
    CHECK(tree.stats().host_pages_held == 0);
    CHECK(host->stats().bytes_used == 0);
    CHECK(f.pool->stats().pages_free == f.pool->stats().pages_total);
}
