// Host mirror, pool and transfer descriptors agree byte for byte for every dtype combination;
// descriptors cover every kind of every layer in layer order; stale destinations and corrupted
// bytes are caught.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cache/codec.h"
#include "cache/transfer.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

// Writes every row of every history buffer (through codecs), every window row and every
// compressor ring of the sequence with random values.
void fill_sequence(page_pool& pool, slot_ref s, int64_t tokens, std::mt19937& rng) {
    const layout_spec& l = pool.layout();
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (const buffer_layout& b : l.buffers()) {
        std::vector<float> v(static_cast<size_t>(b.row.dims));
        for (int64_t w = 0; w < tokens / b.ratio; ++w) {
            for (float& x : v) x = d(rng);
            std::byte* row = pool.row_for_write(s, b.layer, b.kind, w);
            REQUIRE(row != nullptr);
            codec::encode_row(b.row, v, row);
        }
    }
    std::vector<float> v(static_cast<size_t>(l.kv_row().dims));
    for (const layer_layout& ly : l.layers()) {
        for (int64_t pos = 0; pos < l.window_rows(); ++pos) {
            for (float& x : v) x = d(rng);
            codec::encode_row(l.kv_row(), v, pool.window_row_for_write(s, ly.layer, pos));
        }
        for (state_kind k : {state_kind::attn_compressor, state_kind::index_compressor}) {
            if (l.state_index(ly.layer, k) < 0) continue;
            const state_layout& st = l.state(ly.layer, k);
            float* f = pool.compressor_state_for_write(s, ly.layer, k);
            for (int64_t i = 0; i < st.rows * st.floats_per_row; ++i) f[i] = d(rng);
        }
    }
}

int64_t expected_bytes(const layout_spec& l, int64_t tokens) {
    int64_t n = 0;
    for (const buffer_layout& b : l.buffers()) n += tokens / b.ratio * b.row.bytes;
    for (const state_layout& s : l.states()) n += s.bytes;
    return n;
}

}  // namespace

TEST_CASE("transfer: pool -> host mirror -> pool, byte for byte, every dtype combination") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    std::mt19937 rng(1);
    const int64_t tokens = 700;  // 2 full pages + 188 tokens: partial last page
    for (kv_dtype kv : k_all_kv) {
        for (index_k_dtype idx : k_all_idx) {
            CAPTURE(kv_dtype_name(kv));
            CAPTURE(index_k_dtype_name(idx));
            layout_spec l = make_layout(flash, kv, idx);
            auto a = make_pool(l, 4, 1);
            auto b = make_pool(l, 5, 2);
            slot_ref sa = a->alloc_sequence(1);
            REQUIRE(a->ensure_capacity(sa, tokens));
            fill_sequence(*a, sa, tokens, rng);

            auto host = host_mirror::create(l, 6, 2);
            REQUIRE(host.is_ok());
            host_mirror& h = **host;
            std::vector<int64_t> host_pages;
            for (int i = 0; i < 3; ++i) host_pages.push_back(h.alloc_page());
            std::reverse(host_pages.begin(), host_pages.end());

            std::vector<page_move> up;
            for (size_t i = 0; i < 3; ++i) up.push_back({a->page_table(sa)[i].page, {int32_t(host_pages[i]), 0}});
            transfer_plan to_host = plan_transfer(a->geometry(), h.geometry(), up, tokens, sa.slot, {1, 0});
            CHECK(to_host.total_bytes == expected_bytes(l, tokens));
            std::vector<uint64_t> sums = checksum_spans(to_host, a->arena());
            execute_transfer(to_host, a->arena(), h.arena());
            REQUIRE(verify_spans(to_host, h.arena(), sums).is_ok());

            slot_ref other = b->alloc_sequence(9);  // occupies slot 0 and page 0 in b
            REQUIRE(b->ensure_capacity(other, 1));
            slot_ref sb = b->alloc_sequence(2);
            REQUIRE(b->ensure_capacity(sb, tokens));
            std::vector<page_move> down;
            for (size_t i = 0; i < 3; ++i) down.push_back({host_pages[i], b->page_table(sb)[i]});
            transfer_plan to_pool = plan_transfer(h.geometry(), b->geometry(), down, tokens, 1, sb);
            std::vector<uint64_t> host_sums = checksum_spans(to_pool, h.arena());
            REQUIRE(execute_transfer_into_pool(to_pool, h.arena(), *b).is_ok());
            REQUIRE(verify_spans(to_pool, b->arena(), host_sums).is_ok());

            // Row by row through the pool API, and the host bytes at their geometry offsets.
            for (const buffer_layout& bl : l.buffers()) {
                for (int64_t w = 0; w < tokens / bl.ratio; ++w) {
                    const int64_t page_i = w / bl.rows_per_page;
                    const int64_t host_off = h.geometry().row_offset(
                        l.buffer_index(bl.layer, bl.kind), host_pages[page_i], w % bl.rows_per_page);
                    const std::byte* ra = a->row(sa, bl.layer, bl.kind, w);
                    REQUIRE(std::memcmp(ra, b->row(sb, bl.layer, bl.kind, w), size_t(bl.row.bytes)) == 0);
                    REQUIRE(std::memcmp(ra, h.arena() + host_off, size_t(bl.row.bytes)) == 0);
                }
            }
            for (size_t si = 0; si < l.states().size(); ++si) {
                const state_layout& st = l.states()[si];
                const std::byte* sa_bytes = a->arena() + a->geometry().state_offset(int32_t(si), sa.slot);
                REQUIRE(std::memcmp(sa_bytes, b->arena() + b->geometry().state_offset(int32_t(si), sb.slot),
                                    size_t(st.bytes)) == 0);
                REQUIRE(std::memcmp(sa_bytes, h.arena() + h.geometry().state_offset(int32_t(si), 1),
                                    size_t(st.bytes)) == 0);
            }
            // The untouched sequence in b is intact (its slot was not a destination).
            CHECK(b->is_current(other));
            a->check_integrity();
            b->check_integrity();
        }
    }
}

TEST_CASE("transfer: spans are per layer and cover every kind layout_spec lists") {
    model::model_config pro = load_model("deepseek-v4-pro.json");
    layout_spec l = make_layout(pro, kv_dtype::fp8, index_k_dtype::fp4);
    pool_geometry g(l, 4, 2);
    std::vector<page_move> moves = {{0, {1, 0}}, {1, {3, 0}}};
    transfer_plan p = plan_transfer(g, g, moves, 512, 0, {1, 0});
    REQUIRE(p.layer_end.size() == size_t(l.num_layers()));
    int32_t begin = 0;
    for (const layer_layout& ly : l.layers()) {
        std::set<int32_t> buffers, states;
        for (int32_t i = begin; i < p.layer_end[size_t(ly.layer)]; ++i) {
            const transfer_span& s = p.spans[size_t(i)];
            CHECK(s.layer == ly.layer);
            (s.kind == span_kind::history ? buffers : states).insert(s.index);
        }
        CHECK(buffers == std::set<int32_t>(ly.buffers.begin(), ly.buffers.end()));
        CHECK(states == std::set<int32_t>(ly.states.begin(), ly.states.end()));
        begin = p.layer_end[size_t(ly.layer)];
    }
    // A page's spans move exactly page_group_bytes in total.
    transfer_plan one = plan_transfer(g, g, std::span(moves).first(1), 256, -1, {});
    CHECK(one.total_bytes == l.page_group_bytes());
}

TEST_CASE("transfer: stale destinations reject the whole transfer; corruption is detected") {
    model::model_config flash = load_model("deepseek-v4-flash.json");
    layout_spec l = make_layout(flash, kv_dtype::fp8, index_k_dtype::fp8);
    auto a = make_pool(l, 2, 1);
    auto b = make_pool(l, 2, 1);
    std::mt19937 rng(2);
    slot_ref sa = a->alloc_sequence(1);
    REQUIRE(a->ensure_capacity(sa, 256));
    fill_sequence(*a, sa, 256, rng);
    slot_ref sb = b->alloc_sequence(2);
    REQUIRE(b->ensure_capacity(sb, 256));
    std::vector<page_move> moves = {{a->page_table(sa)[0].page, b->page_table(sb)[0]}};
    transfer_plan p = plan_transfer(a->geometry(), b->geometry(), moves, 256, sa.slot, sb);
    b->abort_sequence(sb, 2, 100);  // the decode side aborted: destination quarantined
    const int64_t before = b->stats().stale_writes_rejected;
    status st = execute_transfer_into_pool(p, a->arena(), *b);
    CHECK_FALSE(st.is_ok());
    CHECK(b->stats().stale_writes_rejected == before + int64_t(p.spans.size()));
    const int32_t bi = l.buffer_index(2, buffer_kind::compressed_kv);
    CHECK(b->page_bytes(moves[0].dst.page, bi)[0] == std::byte{0});  // nothing copied

    std::vector<uint64_t> sums = checksum_spans(p, a->arena());
    std::vector<std::byte> raw(size_t(b->geometry().total_bytes()));
    execute_transfer(p, a->arena(), raw.data());
    CHECK(verify_spans(p, raw.data(), sums).is_ok());
    raw[size_t(p.spans[5].dst_offset + 3)] ^= std::byte{1};
    status bad = verify_spans(p, raw.data(), sums);
    CHECK(bad.code() == error_code::data_loss);
    CHECK(bad.message().find("layer") != std::string::npos);
}
