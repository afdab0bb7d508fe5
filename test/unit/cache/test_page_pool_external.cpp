// The page pool over an external arena (a GPU slab in production): the same addresses as a host
// pool, the same epoch rules, state reset written only through the arena's writer, and clear
// refusals of an arena that is too small or has no writer.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "cache/page_pool.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

// A host vector standing in for device memory; counts the writer's calls and bytes.
struct fake_device {
    std::vector<std::byte> mem;
    int64_t writes = 0, bytes_written = 0;
    external_arena arena(int64_t bytes) {
        mem.assign(static_cast<size_t>(bytes), std::byte{0x77});  // not zero: reset must write
        return external_arena{mem.data(), bytes, [this](std::byte* dst, const std::byte* src, int64_t n) {
                                  ++writes;
                                  bytes_written += n;
                                  std::memcpy(dst, src, static_cast<size_t>(n));
                                  return status::ok();
                              }};
    }
};

}  // namespace

TEST_CASE("page_pool external arena: host pool's offsets, epochs, and state reset through the writer") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    const int64_t budget = pool_geometry(l, 8, 2).total_bytes() +
                           pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    auto host = page_pool::create(l, {budget, 2});
    REQUIRE(host.is_ok());
    fake_device dev;
    const int64_t need = (*host)->geometry().total_bytes();
    auto ext = page_pool::create_external(l, {budget, 2}, dev.arena(need));
    REQUIRE_MESSAGE(ext.is_ok(), ext.error().message());
    page_pool& p = **ext;
    CHECK_FALSE(p.host_addressable());
    CHECK((*host)->host_addressable());
    CHECK(p.stats().pages_total == (*host)->stats().pages_total);
    CHECK(p.arena() == dev.mem.data());

    slot_ref s = p.alloc_sequence(1);
    REQUIRE(p.ensure_capacity(s, 1000));
    slot_ref hs = (*host)->alloc_sequence(1);
    REQUIRE((*host)->ensure_capacity(hs, 1000));
    // Same geometry → the same offsets from each arena's base.
    CHECK(p.row_for_write(s, 2, buffer_kind::compressed_kv, 175) - p.arena() ==
          (*host)->row_for_write(hs, 2, buffer_kind::compressed_kv, 175) - (*host)->arena());
    CHECK(p.window_row(s, 0, 133) - p.arena() == (*host)->window_row(hs, 0, 133) - (*host)->arena());

    // Reset goes through the writer, once per state buffer, and leaves kv = 0, score = -inf.
    p.reset_sequence_state(s);
    CHECK(dev.writes == static_cast<int64_t>(l.states().size()));
    int64_t state_bytes = 0;
    for (const state_layout& sl : l.states()) state_bytes += sl.bytes;
    CHECK(dev.bytes_written == state_bytes);
    const float* cs = p.compressor_state(s, 2, state_kind::attn_compressor);
    const state_layout& st = l.state(2, state_kind::attn_compressor);
    CHECK(cs[0] == 0.0f);
    CHECK(cs[st.floats_per_row / 2] == -std::numeric_limits<float>::infinity());
    CHECK(p.window_row(s, 0, 0)[0] == std::byte{0});

    // Epoch rules are the pool's own: a freed sequence's writes are refused and counted.
    p.free_sequence(s);
    CHECK(p.row_for_write(s, 2, buffer_kind::compressed_kv, 0) == nullptr);
    CHECK(p.stats().stale_writes_rejected == 1);
    p.check_integrity();
}

TEST_CASE("page_pool external arena: too small or without a writer is refused clearly") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    const int64_t budget = pool_geometry(l, 8, 2).total_bytes() +
                           pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    fake_device dev;
    auto small = page_pool::create_external(l, {budget, 2}, dev.arena(1 << 20));
    REQUIRE_FALSE(small.is_ok());
    CHECK(small.error().code() == error_code::out_of_range);
    CHECK(small.error().message().find("external arena has 1048576 bytes") != std::string::npos);
    external_arena no_writer{dev.mem.data(), budget, nullptr};
    auto bad = page_pool::create_external(l, {budget, 2}, no_writer);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("writer") != std::string::npos);
}
