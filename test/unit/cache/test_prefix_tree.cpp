// The radix prefix tree (prefix-cache.md §9 T7, T8): random request lifecycles against a reference
// model; splits and matches only at page boundaries; a locked path is never evicted; eviction is
// leaf-first; a matched page still holds the bytes its prefix wrote (no page reused while the
// tree or a sequence holds it); refcounts and the pool's free list stay consistent.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "cache/page_pool.h"
#include "cache/prefix_tree.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

uint64_t prefix_signature(std::span<const int32_t> tokens) { return hash_tokens(tokens) | 1; }

boundary_snapshot fake_snapshot(std::span<const int32_t> tokens) {
    boundary_snapshot s;
    s.header.boundary = static_cast<int64_t>(tokens.size());
    s.header.token_hash = hash_tokens(tokens);
    s.payload.resize(1000);
    return s;
}

// A request of the property test: its tokens, slot and the node it locks.
struct live_request {
    std::vector<int32_t> tokens;  // whole pages only
    slot_ref slot;
    prefix_tree::node* locked = nullptr;
};

struct harness : pool_fixture {
    prefix_tree tree{*pool, 42, {5000}};  // room for 4 fake snapshots
    std::vector<std::vector<int32_t>> families;
    std::set<std::vector<int32_t>> ever_inserted;  // page-multiple prefixes
    std::mt19937_64 rng{2024};

    harness() : pool_fixture(kv_dtype::bf16, index_k_dtype::bf16, 24, 6) {
        for (int f = 0; f < 3; ++f) {
            std::vector<int32_t> t(8 * k_page);
            for (auto& x : t) x = int32_t(rng() % 50);
            if (f > 0) std::copy_n(families[0].begin(), (f * 2) * k_page, t.begin());  // shared heads
            families.push_back(t);
        }
    }

    void write_signature(page_ref p, std::span<const int32_t> prefix) {
        std::byte* b = pool->page_bytes_for_write(p, 0);
        REQUIRE(b != nullptr);
        const uint64_t sig = prefix_signature(prefix);
        std::memcpy(b, &sig, sizeof sig);
    }
    uint64_t signature_of(int32_t page) const {
        uint64_t sig = 0;
        std::memcpy(&sig, pool->page_bytes(page, 0), sizeof sig);
        return sig;
    }

    // The reference answer for match(): the deepest prefix still in the tree with a snapshot.
    int64_t expected_match(std::span<const int32_t> tokens) const {
        const int64_t limit = (int64_t(tokens.size()) - 1) / k_page * k_page;
        int64_t best = 0;
        for (int64_t b = k_page; b <= limit; b += k_page) {
            if (!tree.contains(tokens.first(size_t(b)))) break;
            if (tree.has_snapshot(tokens.first(size_t(b)))) best = b;
        }
        return best;
    }

    void check_all(const std::vector<live_request>& live) {
        tree.check_integrity();
        pool->check_integrity();
        // Leaf-first: an absent prefix has no present extension.
        for (const auto& p : ever_inserted) {
            if (tree.contains(p)) continue;
            for (const auto& q : ever_inserted) {
                if (q.size() > p.size() && std::equal(p.begin(), p.end(), q.begin())) {
                    CHECK_FALSE(tree.contains(q));
                }
            }
        }
        // A locked path survives, and every page a sequence holds still carries its bytes.
        for (const live_request& r : live) {
            auto table = pool->page_table(r.slot);
            for (size_t i = 0; i < table.size(); ++i) {
                const auto prefix = std::span<const int32_t>(r.tokens).first((i + 1) * k_page);
                CHECK(signature_of(table[i].page) == prefix_signature(prefix));
            }
        }
        // Pages are either free, held by the tree, or held by live sequences.
        int64_t held = 0;
        std::set<int32_t> seen;
        for (const live_request& r : live)
            for (const page_ref& p : pool->page_table(r.slot)) seen.insert(p.page);
        held = int64_t(seen.size());
        CHECK(pool->stats().pages_free + tree.stats().pages_held >= pool->stats().pages_total - held);
    }

    bool start(std::vector<live_request>& live) {
        const auto& fam = families[rng() % families.size()];
        const int64_t pages = 1 + int64_t(rng() % 6);
        live_request r;
        r.tokens.assign(fam.begin(), fam.begin() + pages * k_page);
        r.tokens.push_back(int32_t(rng() % 50));  // one token past the pages: always recomputed
        r.slot = pool->alloc_sequence(7);
        if (!r.slot.valid()) return false;
        prefix_tree::match_result m = tree.match(r.tokens);
        CHECK(m.tokens == expected_match(r.tokens));
        CHECK(m.tokens % k_page == 0);
        CHECK(m.tokens <= int64_t(r.tokens.size()) - 1);
        if (m.tokens > 0) {
            REQUIRE(m.snapshot != nullptr);
            CHECK(m.snapshot->header.boundary == m.tokens);
            CHECK(m.snapshot->header.token_hash == hash_tokens(std::span(r.tokens).first(size_t(m.tokens))));
            tree.lock(m.at);
            r.locked = m.at;
        }
        for (const page_ref& p : m.pages) {
            pool->retain_page(p);
            pool->append_page(r.slot, p);
        }
        for (int64_t i = int64_t(m.pages.size()); i < pages; ++i) {
            page_ref p = pool->alloc_page(7);
            if (!p.valid()) {
                tree.evict_pages(1);
                p = pool->alloc_page(7);
            }
            if (!p.valid()) {  // the pool is full of locked pages: give up (as admission would)
                tree.unlock(r.locked);
                pool->free_sequence(r.slot);
                return false;
            }
            write_signature(p, std::span<const int32_t>(r.tokens).first(size_t((i + 1) * k_page)));
            pool->append_page(r.slot, p);
        }
        r.tokens.pop_back();
        live.push_back(std::move(r));
        return true;
    }

    void finish(std::vector<live_request>& live, size_t at, bool publish) {
        live_request r = std::move(live[at]);
        live.erase(live.begin() + std::ptrdiff_t(at));
        if (publish) {
            // Publish a random page-multiple prefix of what it computed.
            const int64_t b = (1 + int64_t(rng() % (r.tokens.size() / k_page))) * k_page;
            const auto prefix = std::span<const int32_t>(r.tokens).first(size_t(b));
            std::optional<boundary_snapshot> snap;
            if (rng() % 3 != 0) snap = fake_snapshot(prefix);
            prefix_tree::node* n = tree.insert(prefix, pool->page_table(r.slot), std::move(snap));
            for (int64_t e = k_page; e <= b; e += k_page)
                ever_inserted.insert(std::vector<int32_t>(prefix.begin(), prefix.begin() + e));
            tree.lock(n);
            tree.unlock(r.locked);
            r.locked = n;
        }
        tree.unlock(r.locked);
        pool->free_sequence(r.slot);
    }
};

}  // namespace

TEST_CASE("prefix tree: T8 random lifecycles keep every invariant of the reference model") {
    harness h;
    std::vector<live_request> live;
    int64_t started = 0, hits = 0;
    for (int step = 0; step < 1500; ++step) {
        CAPTURE(step);
        const uint64_t op = h.rng() % 10;
        if (op < 4 && live.size() < 5) {
            const int64_t before = h.tree.stats().pages_held;
            (void)before;
            if (h.start(live)) ++started;
            if (!live.empty() && live.back().locked != nullptr) ++hits;
        } else if (op < 8 && !live.empty()) {
            h.finish(live, size_t(h.rng() % live.size()), op != 7);
        } else if (op == 8) {
            const int64_t evictable = h.tree.evictable_pages();
            const int64_t free_before = h.pool->stats().pages_free;
            const int64_t freed = h.tree.evict_pages(1 + int64_t(h.rng() % 3));
            CHECK(freed <= evictable);
            CHECK(h.pool->stats().pages_free == free_before + freed);
        } else if (op == 9 && live.empty()) {
            h.tree.flush();
            CHECK(h.tree.stats().pages_held == 0);
            CHECK(h.tree.stats().snapshots == 0);
            CHECK(h.pool->stats().pages_free == h.pool->stats().pages_total);
        }
        h.check_all(live);
        CHECK(h.tree.stats().snapshot_bytes <= 5000);
    }
    CHECK(started > 300);
    CHECK(hits > 50);  // the test exercised reuse, not only misses
    CHECK(h.tree.stats().evicted_pages > 0);
    CHECK(h.tree.stats().evicted_snapshots > 0);
    while (!live.empty()) h.finish(live, 0, false);
    h.tree.flush();
    h.pool->check_integrity();
    CHECK(h.pool->stats().pages_free == h.pool->stats().pages_total);
}

TEST_CASE("prefix tree: T7 matches clamp to whole pages, a snapshot, and len - 1") {
    harness h;
    std::vector<int32_t> t(h.families[0].begin(), h.families[0].begin() + 4 * k_page);
    slot_ref s = h.pool->alloc_sequence(1);
    for (int64_t i = 0; i < 4; ++i) {
        page_ref p = h.pool->alloc_page(1);
        h.write_signature(p, std::span<const int32_t>(t).first(size_t((i + 1) * k_page)));
        h.pool->append_page(s, p);
    }
    // Snapshots at 1 and 3 pages only.
    h.tree.insert(std::span<const int32_t>(t).first(k_page), h.pool->page_table(s),
                  fake_snapshot(std::span<const int32_t>(t).first(k_page)));
    h.tree.insert(std::span<const int32_t>(t).first(3 * k_page), h.pool->page_table(s),
                  fake_snapshot(std::span<const int32_t>(t).first(3 * k_page)));
    h.tree.insert(t, h.pool->page_table(s), std::nullopt);
    auto query = [&](size_t len, int32_t change_at = -1) {
        std::vector<int32_t> q(t.begin(), t.begin() + std::ptrdiff_t(std::min(len, t.size())));
        while (q.size() < len) q.push_back(1);
        if (change_at >= 0) q[size_t(change_at)] ^= 0x40;
        return h.tree.match(q).tokens;
    };
    CHECK(query(k_page) == 0);                   // a whole page but nothing left to compute
    CHECK(query(k_page + 1) == k_page);
    CHECK(query(3 * k_page) == k_page);          // len − 1 reaches only into page 3
    CHECK(query(3 * k_page + 1) == 3 * k_page);
    CHECK(query(4 * k_page + 50) == 3 * k_page); // page 4 has history but no snapshot
    CHECK(query(4 * k_page, 3 * k_page - 1) == k_page);  // diverges in the last token of page 3
    CHECK(query(4 * k_page, k_page) == k_page);          // diverges at the first token of page 2
    CHECK(query(4 * k_page, 5) == 0);
    auto history = [&](size_t len, int32_t change_at) {
        std::vector<int32_t> q(t.begin(), t.begin() + std::ptrdiff_t(std::min(len, t.size())));
        while (q.size() < len) q.push_back(1);
        if (change_at >= 0) q[size_t(change_at)] ^= 0x40;
        return h.tree.history_depth(q);
    };
    CHECK(history(4 * k_page + 1, -1) == 4 * k_page);     // history reaches past the last snapshot
    CHECK(history(4 * k_page, -1) == 3 * k_page);         // ... but never the last token's page
    CHECK(history(5 * k_page, 2 * k_page + 3) == 2 * k_page);  // where a branch leaves it
    h.pool->free_sequence(s);
    CHECK(h.tree.stats().pages_held == 4);
    CHECK(h.tree.evictable_pages() == 4);
    // The dangling page (no snapshot at or below it) goes first.
    CHECK(h.tree.evict_pages(1) == 1);
    CHECK_FALSE(h.tree.contains(t));
    CHECK(h.tree.contains(std::span<const int32_t>(t).first(3 * k_page)));
    CHECK(h.tree.flush() == 3);
    h.tree.check_integrity();
}
