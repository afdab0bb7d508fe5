// Boundary snapshots on the real tiny model (prefix-cache.md §9 T1, T3, T4): a sequence resumed
// from a snapshot + shared history pages computes bitwise the logits of one that never stopped,
// and poisoning any captured part breaks that while poisoning what a snapshot leaves out does not.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "cache/snapshot.h"
#include "model_test_util.h"

using namespace tandem;
using namespace tandem::model;
using namespace tandem::model::testing;

namespace {

constexpr uint64_t k_key = 0x5eed;

std::vector<int32_t> random_tokens(uint64_t seed, int64_t n, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(2 + rng() % static_cast<uint64_t>(vocab - 2));
    return t;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

struct fixture {
    temp_dir dir{"snapshot"};
    std::unique_ptr<session> ss;
    int64_t vocab = 0;
    fixture(cache::kv_dtype kv, cache::index_k_dtype ik) {
        make_checkpoint("tiny", 7, dir.str());
        ss = std::make_unique<session>(dir.str(), 2, kv, ik);
        vocab = ss->m->config().vocab_size;
    }
    int64_t page() const { return ss->pool->layout().page_size(); }

    // Every position's logits, one call.
    std::vector<float> cold(const std::vector<int32_t>& tokens) {
        cache::slot_ref s = ss->new_sequence();
        std::vector<float> all = ss->run(s, tokens, 0, true);
        ss->pool->free_sequence(s);
        return all;
    }

    // A sequence that computed tokens[0, b), sealed pages, and its snapshot at b.
    struct source {
        cache::slot_ref slot;
        cache::boundary_snapshot snap;
    };
    source prefix(const std::vector<int32_t>& tokens, int64_t b) {
        source src{ss->new_sequence(), {}};
        ss->run(src.slot, std::span<const int32_t>(tokens.data(), size_t(b)), 0, false);
        for (const cache::page_ref& p : ss->pool->page_table(src.slot)) ss->pool->seal_page(p);
        src.snap = cache::capture_snapshot(*ss->pool, src.slot,
                                           std::span<const int32_t>(tokens.data(), size_t(b)), k_key);
        return src;
    }

    // A fresh slot holding the source's pages by reference and its restored snapshot.
    cache::slot_ref resume(const source& src, const std::vector<int32_t>& tokens) {
        cache::slot_ref s = ss->new_sequence();
        const int64_t b = src.snap.header.boundary;
        for (int64_t i = 0; i < b / page(); ++i) {
            const cache::page_ref p = ss->pool->page_table(src.slot)[size_t(i)];
            ss->pool->retain_page(p);
            ss->pool->append_page(s, p);
        }
        const auto prefix_tokens = std::span<const int32_t>(tokens.data(), size_t(b));
        status st = cache::verify_snapshot(ss->pool->layout(), src.snap, prefix_tokens, k_key);
        REQUIRE_MESSAGE(st.is_ok(), st.message());
        REQUIRE(cache::restore_snapshot(*ss->pool, s, src.snap).is_ok());
        return s;
    }

    std::vector<float> continue_from(cache::slot_ref s, const std::vector<int32_t>& tokens, int64_t b) {
        return ss->run(s, std::span<const int32_t>(tokens.data() + b, tokens.size() - size_t(b)), b, true);
    }

    // Continues `s` from b to the end: every position's logits for the first k_probe tokens, then
    // the rest as one chunk and its last position. (Each logits row costs a 129k-vocab head;
    // T1 shows chunking changes nothing, so two chunks stand for any.)
    static constexpr int64_t k_probe = 8;
    std::vector<float> probe(cache::slot_ref s, const std::vector<int32_t>& tokens, int64_t b) {
        const int64_t n = int64_t(tokens.size()) - b, first = std::min(n, k_probe);
        std::vector<float> got = ss->run(s, std::span<const int32_t>(tokens.data() + b, size_t(first)), b, true);
        if (n > first) {
            auto last = ss->run(s, std::span<const int32_t>(tokens.data() + b + first, size_t(n - first)), b + first,
                                false);
            got.insert(got.end(), last.begin(), last.end());
        }
        return got;
    }
};

}  // namespace

TEST_CASE("snapshot: T1 a prefill split at any k around page boundaries gives the same logits") {
    fixture fx(cache::kv_dtype::fp8, cache::index_k_dtype::fp4);
    const auto tokens = random_tokens(3, 300, fx.vocab);
    const std::vector<float> whole = fx.cold(tokens);
    const int64_t V = fx.vocab, window = 6;
    for (int64_t k : {1, 3, 4, 5, 127, 128, 129, 255, 256, 257, 293}) {
        CAPTURE(k);
        // Split at k, then compare the positions around the split (every position of the second
        // chunk's first `window` tokens, and the last one of the whole prompt).
        cache::slot_ref s = fx.ss->new_sequence();
        auto before = fx.ss->run(s, std::span<const int32_t>(tokens.data(), size_t(k)), 0, false);
        CHECK(bitwise_equal(before, std::span<const float>(whole).subspan(size_t((k - 1) * V), size_t(V))));
        auto near = fx.ss->run(s, std::span<const int32_t>(tokens.data() + k, size_t(window)), k, true);
        CHECK(bitwise_equal(near, std::span<const float>(whole).subspan(size_t(k * V), size_t(window * V))));
        auto last = fx.ss->run(s, std::span<const int32_t>(tokens.data() + k + window,
                                                           tokens.size() - size_t(k + window)), k + window, false);
        CHECK(bitwise_equal(last, std::span<const float>(whole).subspan(whole.size() - size_t(V))));
        fx.ss->pool->free_sequence(s);
    }
}

TEST_CASE("snapshot: T2 state built token by token equals state built by one prefill, byte for byte") {
    fixture fx(cache::kv_dtype::fp8, cache::index_k_dtype::fp4);
    const int64_t P = fx.page();
    const auto tokens = random_tokens(8, 2 * P, fx.vocab);
    const auto at = std::span<const int32_t>(tokens);
    cache::slot_ref whole = fx.ss->new_sequence(), stepped = fx.ss->new_sequence();
    fx.ss->run(whole, at, 0, false);
    fx.ss->run(stepped, at.first(size_t(P + 5)), 0, false);
    for (int64_t pos = P + 5; pos < 2 * P; ++pos) fx.ss->run(stepped, at.subspan(size_t(pos), 1), pos, false);
    CHECK(cache::capture_snapshot(*fx.ss->pool, whole, at, k_key).payload ==
          cache::capture_snapshot(*fx.ss->pool, stepped, at, k_key).payload);
    const auto& layout = fx.ss->pool->layout();
    for (size_t page = 0; page < 2; ++page) {
        for (size_t bi = 0; bi < layout.buffers().size(); ++bi) {
            CAPTURE(page);
            CAPTURE(cache::buffer_kind_name(layout.buffers()[bi].kind));
            CHECK(std::memcmp(fx.ss->pool->page_bytes(fx.ss->pool->page_table(whole)[page].page, int32_t(bi)),
                              fx.ss->pool->page_bytes(fx.ss->pool->page_table(stepped)[page].page, int32_t(bi)),
                              size_t(layout.buffers()[bi].bytes_per_page)) == 0);
        }
    }
    fx.ss->pool->free_sequence(whole);
    fx.ss->pool->free_sequence(stepped);
}

TEST_CASE("snapshot: T3 resuming at a boundary equals the uninterrupted run, every length class") {
    struct dtypes { cache::kv_dtype kv; cache::index_k_dtype ik; };
    for (dtypes d : {dtypes{cache::kv_dtype::bf16, cache::index_k_dtype::bf16},
                     dtypes{cache::kv_dtype::fp8, cache::index_k_dtype::fp8},
                     dtypes{cache::kv_dtype::fp8, cache::index_k_dtype::fp4}}) {
        CAPTURE(cache::kv_dtype_name(d.kv));
        CAPTURE(cache::index_k_dtype_name(d.ik));
        fixture fx(d.kv, d.ik);
        const int64_t P = fx.page();
        for (int64_t b : {P, 2 * P}) {
            for (int64_t extra : {int64_t{1}, P - 1, P, P + 1}) {
                CAPTURE(b);
                CAPTURE(extra);
                const auto tokens = random_tokens(uint64_t(b * 1000 + extra), b + extra, fx.vocab);
                auto src = fx.prefix(tokens, b);
                cache::slot_ref s = fx.resume(src, tokens);
                // The restored slot yields the very snapshot it was restored from.
                auto again = cache::capture_snapshot(*fx.ss->pool, s,
                                                     std::span<const int32_t>(tokens.data(), size_t(b)), k_key);
                CHECK(again.payload == src.snap.payload);
                // The source slot itself continues as the uninterrupted run.
                const auto resumed = fx.probe(s, tokens, b);
                const cache::slot_ref c = src.slot;
                CHECK(bitwise_equal(resumed, fx.probe(c, tokens, b)));
                if (extra == P) {
                    // One page later, a snapshot of the resumed run equals one of the uninterrupted
                    // run, and so does the history page written meanwhile, byte for byte per kind.
                    const auto at = std::span<const int32_t>(tokens.data(), size_t(b + P));
                    CHECK(cache::capture_snapshot(*fx.ss->pool, s, at, k_key).payload ==
                          cache::capture_snapshot(*fx.ss->pool, c, at, k_key).payload);
                    const auto& layout = fx.ss->pool->layout();
                    for (size_t bi = 0; bi < layout.buffers().size(); ++bi) {
                        CAPTURE(cache::buffer_kind_name(layout.buffers()[bi].kind));
                        const auto* x = fx.ss->pool->page_bytes(fx.ss->pool->page_table(s)[size_t(b / P)].page, int32_t(bi));
                        const auto* y = fx.ss->pool->page_bytes(fx.ss->pool->page_table(c)[size_t(b / P)].page, int32_t(bi));
                        CHECK(std::memcmp(x, y, size_t(layout.buffers()[bi].bytes_per_page)) == 0);
                    }
                }
                fx.ss->pool->free_sequence(s);
                fx.ss->pool->free_sequence(src.slot);
            }
        }
        fx.ss->pool->check_integrity();
        CHECK(fx.ss->pool->stats().pages_free == fx.ss->pool->stats().pages_total);
    }
}

namespace {

// Overwrites bytes [off, off + n) of a state region of `slot` with values no run would hold.
void poison(cache::page_pool& pool, cache::slot_ref slot, int32_t state_idx, int64_t off, int64_t n,
            bool floats) {
    const cache::state_layout& st = pool.layout().states()[size_t(state_idx)];
    std::byte* base = pool.slot_bytes_for_write(slot) + st.offset_in_slot;
    REQUIRE(off + n <= st.bytes);
    if (floats) {
        float* f = reinterpret_cast<float*>(base + off);
        for (int64_t i = 0; i < n / 4; ++i) f[i] = (i % 2 == 0) ? 4.0f + float(i % 13) : -3.0f + float(i % 7);
    } else {
        std::mt19937 rng(uint32_t(state_idx * 7 + off));
        for (int64_t i = 0; i < n; ++i) base[off + i] = std::byte(rng() & 0x3f);  // finite in any format
    }
}

}  // namespace

TEST_CASE("snapshot: T4 poisoning a captured part breaks resumption; poisoning the rest does not") {
    fixture fx(cache::kv_dtype::bf16, cache::index_k_dtype::bf16);
    const auto& layout = fx.ss->pool->layout();
    const int64_t P = fx.page(), b = P, extra = 36;  // 9 CSA windows, 2 HCA windows after b
    const auto tokens = random_tokens(99, b + extra, fx.vocab);
    const std::vector<float> whole = fx.cold(tokens);
    const auto tail = std::span<const float>(whole).subspan(size_t(b * fx.vocab));
    auto src = fx.prefix(tokens, b);
    auto run_poisoned = [&](auto&& spoil) {
        cache::slot_ref s = fx.resume(src, tokens);
        spoil(s);
        const bool same = bitwise_equal(fx.continue_from(s, tokens, b), tail);
        fx.ss->pool->free_sequence(s);
        return same;
    };
    CHECK(run_poisoned([](cache::slot_ref) {}));  // control: untouched resumes exactly

    // Every captured part is needed: poisoning it changes the logits (the MTP layer's window is
    // captured for speculative decoding, which the forward pass does not run yet).
    for (const cache::snapshot_part& p : cache::snapshot_parts(layout, b)) {
        CAPTURE(p.layer);
        CAPTURE(cache::state_kind_name(p.kind));
        const bool mtp = layout.layers()[size_t(p.layer)].is_mtp;
        const cache::state_layout& st = layout.states()[size_t(p.state_idx)];
        const bool same = run_poisoned([&](cache::slot_ref s) {
            if (p.kind == cache::state_kind::window) {
                poison(*fx.ss->pool, s, p.state_idx, 0, st.bytes, false);
            } else {  // the Ca half of rows 0..m−1: kv[0:D'] and score[0:D']
                const int64_t d = st.floats_per_row / 4;
                for (int64_t r = 0; r < p.rows; ++r) {
                    poison(*fx.ss->pool, s, p.state_idx, r * st.bytes_per_row, d * 4, true);
                    poison(*fx.ss->pool, s, p.state_idx, r * st.bytes_per_row + 2 * d * 4, d * 4, true);
                }
            }
        });
        CHECK(same == mtp);
    }

    // What a snapshot leaves out is never read before it is overwritten.
    for (size_t i = 0; i < layout.states().size(); ++i) {
        const cache::state_layout& st = layout.states()[i];
        if (st.kind == cache::state_kind::window) continue;
        CAPTURE(st.layer);
        CAPTURE(cache::state_kind_name(st.kind));
        const int64_t ratio = layout.layers()[size_t(st.layer)].ratio;
        const bool overlapping = st.rows == 2 * ratio;
        CHECK(run_poisoned([&](cache::slot_ref s) {
            if (!overlapping) {  // HCA: the whole ring
                poison(*fx.ss->pool, s, int32_t(i), 0, st.bytes, true);
                return;
            }
            const int64_t d = st.floats_per_row / 4;
            for (int64_t r = 0; r < ratio; ++r) {  // Cb halves of the previous window's rows
                poison(*fx.ss->pool, s, int32_t(i), r * st.bytes_per_row + d * 4, d * 4, true);
                poison(*fx.ss->pool, s, int32_t(i), r * st.bytes_per_row + 3 * d * 4, d * 4, true);
            }
            // the current window's rows
            poison(*fx.ss->pool, s, int32_t(i), ratio * st.bytes_per_row, ratio * st.bytes_per_row, true);
        }));
    }
    fx.ss->pool->free_sequence(src.slot);
}

TEST_CASE("snapshot: T10 verification rejects a snapshot that does not match, naming the field") {
    fixture fx(cache::kv_dtype::fp8, cache::index_k_dtype::fp8);
    const int64_t P = fx.page();
    const auto tokens = random_tokens(5, P + 3, fx.vocab);
    auto src = fx.prefix(tokens, P);
    const auto& layout = fx.ss->pool->layout();
    const auto prefix = std::span<const int32_t>(tokens.data(), size_t(P));
    REQUIRE(cache::verify_snapshot(layout, src.snap, prefix, k_key).is_ok());
    auto expect = [&](const cache::boundary_snapshot& s, std::span<const int32_t> t, uint64_t key,
                      const char* words) {
        status st = cache::verify_snapshot(layout, s, t, key);
        REQUIRE_FALSE(st.is_ok());
        CHECK_MESSAGE(st.message().find(words) != std::string::npos, st.message());
    };
    expect(src.snap, prefix, k_key + 1, "cache key");
    std::vector<int32_t> other(prefix.begin(), prefix.end());
    other[17] ^= 1;
    expect(src.snap, other, k_key, "token hash");
    expect(src.snap, std::span<const int32_t>(tokens.data(), size_t(P + 1)), k_key, "boundary");
    for (const cache::snapshot_part& p : cache::snapshot_parts(layout, P)) {
        auto bad = src.snap;
        bad.payload[size_t(p.payload_offset + p.bytes / 2)] ^= std::byte{1};
        expect(bad, prefix, k_key, (std::string(cache::state_kind_name(p.kind)) + " checksum").c_str());
    }
    auto truncated = src.snap;
    truncated.payload.resize(truncated.payload.size() - 1);
    expect(truncated, prefix, k_key, "payload");
    auto wrong_magic = src.snap;
    wrong_magic.header.magic ^= 1;
    expect(wrong_magic, prefix, k_key, "magic");
    fx.ss->pool->free_sequence(src.slot);
}
