// The page pool: allocation, epochs and stale-write rejection, quarantine and leases, sharing,
// per-sequence row addressing, fixed state, and an arena larger than 2^31 bytes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "cache/page_pool.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

TEST_CASE("page_pool: budget split") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    auto s = plan_pool_split(l, {int64_t{64} << 30, 0});
    REQUIRE(s.is_ok());
    CHECK(s->num_slots >= 1);
    CHECK(s->num_slots * l.state_bytes_per_sequence() <= (int64_t{64} << 30) / 8 + l.state_bytes_per_sequence());
    CHECK(pool_geometry(l, s->num_pages, s->num_slots).total_bytes() <= int64_t{64} << 30);
    CHECK(pool_geometry(l, s->num_pages + 1, s->num_slots).total_bytes() > (int64_t{64} << 30) - 256 * 64);
    CHECK(s->tokens == s->num_pages * 256);
    CHECK_FALSE(plan_pool_split(l, {1 << 20, 0}).is_ok());  // 1 MiB: not one slot
    CHECK_FALSE(plan_pool_split(l, {0, 0}).is_ok());
}

TEST_CASE("page_pool: stale-epoch writes are rejected and counted") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    auto pool = make_pool(l, 4, 2);
    const int32_t b = l.buffer_index(2, buffer_kind::index_k);
    page_ref a = pool->alloc_page(1);
    REQUIRE(a.valid());
    CHECK(pool->page_bytes_for_write(a, b) != nullptr);
    pool->release_page(a);  // freed
    CHECK(pool->page_bytes_for_write(a, b) == nullptr);  // free page: rejected
    CHECK(pool->stats().stale_writes_rejected == 1);
    page_ref again = pool->alloc_page(2);  // same page (LIFO), new epoch
    CHECK(again.page == a.page);
    CHECK(again.epoch != a.epoch);
    CHECK(pool->page_bytes_for_write(a, b) == nullptr);  // the old owner's write
    CHECK(pool->page_bytes_for_write(again, b) != nullptr);
    CHECK(pool->stats().stale_writes_rejected == 2);
    pool->seal_page(again);
    CHECK(pool->page_bytes_for_write(again, b) == nullptr);  // sealed history is immutable
    CHECK(pool->stats().stale_writes_rejected == 3);
    pool->check_integrity();
}

TEST_CASE("page_pool: O(1) free lists, exhaustion, sharing") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp4);
    auto pool = make_pool(l, 3, 2);
    page_ref p[3];
    for (auto& r : p) r = pool->alloc_page(7);
    CHECK_FALSE(pool->alloc_page(7).valid());
    CHECK_FALSE(pool->can_alloc_pages(1));
    pool->seal_page(p[0]);
    pool->retain_page(p[0]);  // shared by a second sequence / the prefix tree
    pool->release_page(p[0]);
    CHECK(pool->state_of(p[0].page) == page_state::sealed);
    CHECK_FALSE(pool->can_alloc_pages(1));
    pool->release_page(p[0]);
    CHECK(pool->state_of(p[0].page) == page_state::free);
    CHECK(pool->can_alloc_pages(1));
    pool->check_integrity();
}

TEST_CASE("page_pool: aborted pages stay quarantined until release or lease expiry") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    auto pool = make_pool(l, 4, 2);
    slot_ref s = pool->alloc_sequence(42);
    REQUIRE(pool->ensure_capacity(s, 600));  // 3 pages
    page_ref shared = pool->page_table(s)[0];
    pool->seal_page(shared);
    pool->retain_page(shared);  // the prefix tree keeps it
    page_ref p1 = pool->page_table(s)[1];
    pool->abort_sequence(s, /*writer=*/42, /*lease_deadline_ns=*/1000);
    pool->check_integrity();
    CHECK(pool->stats().pages_quarantined == 2);
    CHECK(pool->stats().pages_free == 1);
    CHECK(pool->state_of(shared.page) == page_state::sealed);  // still alive for the tree
    CHECK(pool->row_for_write(s, 2, buffer_kind::compressed_kv, 0) == nullptr);  // stale slot
    CHECK(pool->page_bytes_for_write(p1, 0) == nullptr);  // quarantined: writer's late write
    CHECK(pool->stats().stale_writes_rejected == 2);
    CHECK_FALSE(pool->can_alloc_pages(2));  // quarantined pages are not reusable
    CHECK(pool->expire_leases(999) == 0);
    CHECK(pool->release_quarantine(/*writer=*/7) == 0);
    CHECK(pool->release_quarantine(42) == 3);  // 2 pages + the slot
    CHECK(pool->stats().pages_free == 3);
    CHECK(pool->stats().slots_free == 2);

    slot_ref t = pool->alloc_sequence(43);
    REQUIRE(pool->ensure_capacity(t, 256));
    pool->abort_sequence(t, 43, 500);
    CHECK(pool->expire_leases(499) == 0);
    CHECK(pool->expire_leases(500) == 2);
    CHECK(pool->stats().leases_expired == 2);
    pool->check_integrity();
}

TEST_CASE("page_pool: rows by sequence and position, fixed state") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    auto pool = make_pool(l, 8, 2);
    slot_ref s = pool->alloc_sequence(1);
    slot_ref u = pool->alloc_sequence(2);
    REQUIRE(pool->ensure_capacity(u, 1));  // u takes page 0, so s's pages are not 0..n
    REQUIRE(pool->ensure_capacity(s, 1000));
    CHECK(pool->page_table(s).size() == 4);
    // CSA layer 2, token 700 -> compressed row 175 -> page 2 of the table, row 47 in it.
    std::byte* w = pool->row_for_write(s, 2, buffer_kind::compressed_kv, 700 / 4);
    REQUIRE(w != nullptr);
    const page_ref pg = pool->page_table(s)[2];
    const int32_t bi = l.buffer_index(2, buffer_kind::compressed_kv);
    CHECK(w == pool->arena() + pool->geometry().row_offset(bi, pg.page, 47));
    std::memset(w, 0x5a, static_cast<size_t>(l.kv_row().bytes));
    CHECK(pool->row(s, 2, buffer_kind::compressed_kv, 175)[0] == std::byte{0x5a});
    // HCA layer 3, token 700 -> row 5 -> page 2, row 1.
    CHECK(pool->row(s, 3, buffer_kind::compressed_kv, 5) ==
          pool->arena() + pool->geometry().row_offset(l.buffer_index(3, buffer_kind::compressed_kv),
                                                      pg.page, 1));
    // Window ring wraps at 128; distinct sequences have distinct slots.
    CHECK(pool->window_row(s, 0, 5) == pool->window_row(s, 0, 133));
    CHECK(pool->window_row(s, 0, 5) != pool->window_row(u, 0, 5));
    CHECK(pool->window_row(s, 43, 1) - pool->window_row(s, 43, 0) == l.kv_row().bytes);
    // Compressor rings start at kv = 0, score = -inf.
    pool->reset_sequence_state(s);
    const float* cs = pool->compressor_state(s, 2, state_kind::attn_compressor);
    const state_layout& st = l.state(2, state_kind::attn_compressor);
    CHECK(cs[0] == 0.0f);
    CHECK(cs[st.floats_per_row / 2] == -std::numeric_limits<float>::infinity());
    CHECK(cs[st.floats_per_row * st.rows - 1] == -std::numeric_limits<float>::infinity());
    CHECK(pool->compressor_state(s, 2, state_kind::index_compressor) != nullptr);
    pool->free_sequence(s);
    CHECK(pool->row_for_write(s, 2, buffer_kind::compressed_kv, 0) == nullptr);
    CHECK(pool->window_row_for_write(s, 0, 0) == nullptr);
    CHECK(pool->stats().pages_free == 7);
    pool->check_integrity();
}

TEST_CASE("page_pool: an arena beyond 2^31 bytes addresses its last row") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    const int64_t pages = 2300;  // 2300 x 985664 B = 2.27 GB (mapped lazily, touched sparsely)
    auto pool = make_pool(l, pages, 1);
    const int32_t last = static_cast<int32_t>(l.buffers().size() - 1);
    const buffer_layout& lb = l.buffers()[last];
    const int64_t off = pool->geometry().row_offset(last, pages - 1, lb.rows_per_page - 1);
    CHECK(off > (int64_t{1} << 31));
    CHECK(off + lb.row.bytes <= pool->geometry().total_bytes());
    page_ref p{};
    for (int64_t i = 0; i < pages; ++i) p = pool->alloc_page(1);
    REQUIRE(p.page == pages - 1);
    std::byte* bytes = pool->page_bytes_for_write(p, last);
    REQUIRE(bytes != nullptr);
    CHECK(bytes == pool->arena() + pool->geometry().page_offset(last, pages - 1));
    std::memset(bytes + (lb.rows_per_page - 1) * lb.row.bytes, 0x11, static_cast<size_t>(lb.row.bytes));
    CHECK(pool->arena()[off] == std::byte{0x11});
}

TEST_CASE("page_pool: a sealed history page is shared read-only by a second sequence") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::bf16, index_k_dtype::fp4);
    auto pool = make_pool(l, 3, 2);
    slot_ref a = pool->alloc_sequence(1);
    REQUIRE(pool->ensure_capacity(a, 256));
    std::byte* w = pool->row_for_write(a, 2, buffer_kind::index_k, 63);
    REQUIRE(w != nullptr);
    std::memset(w, 0x42, static_cast<size_t>(l.index_k_row().bytes));
    const page_ref shared = pool->page_table(a)[0];
    pool->seal_page(shared);  // the page is complete history now

    slot_ref b = pool->alloc_sequence(2);
    pool->retain_page(shared);
    pool->append_page(b, shared);
    CHECK(pool->row(b, 2, buffer_kind::index_k, 63) == pool->row(a, 2, buffer_kind::index_k, 63));
    CHECK(pool->row(b, 2, buffer_kind::index_k, 63)[0] == std::byte{0x42});
    CHECK(pool->row_for_write(b, 2, buffer_kind::index_k, 0) == nullptr);  // immutable
    CHECK(pool->refcount_of(shared.page) == 2);
    REQUIRE(pool->ensure_capacity(b, 300));  // b continues on a private page
    CHECK(pool->row_for_write(b, 2, buffer_kind::index_k, 64) != nullptr);
    CHECK_FALSE(pool->ensure_capacity(b, 4 * 256));  // needs 2 more pages, only 1 free
    CHECK(pool->page_table(b).size() == 2);          // nothing allocated by the failed call
    pool->free_sequence(a);
    CHECK(pool->state_of(shared.page) == page_state::sealed);  // b still reads it
    pool->free_sequence(b);
    CHECK(pool->state_of(shared.page) == page_state::free);
    CHECK(pool->stats().pages_free == 3);
    pool->check_integrity();
}
