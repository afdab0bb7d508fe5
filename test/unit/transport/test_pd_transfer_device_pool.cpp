// pd transfers between pools whose arenas are external (device memory in production): the sender
// reads every span through the arena's reader, the receiver writes through its writer and reads
// the landed bytes back to check them against the same XXH3 — so a copy that lands wrong is a
// data_loss naming the write, never state a request runs on. A host vector stands in for each
// device and can be told to damage a write as it lands.
#include <doctest/doctest.h>

#include <cstring>

#include "topo/pd_transfer.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::topo;
using namespace tandem::transport::testing;

namespace {

struct fake_device {
    std::vector<std::byte> mem;
    int64_t reads = 0, writes = 0;
    int64_t damage_write = -1;  // the index of the write that lands with its first byte flipped

    cache::external_arena arena(int64_t bytes) {
        mem.assign(static_cast<size_t>(bytes), std::byte{0});
        auto write = [this](std::byte* dst, const std::byte* src, int64_t n) {
            std::memcpy(dst, src, static_cast<size_t>(n));
            if (writes++ == damage_write) dst[0] ^= std::byte{0x5a};
            return status::ok();
        };
        auto read = [this](std::byte* dst, const std::byte* src, int64_t n) {
            ++reads;
            std::memcpy(dst, src, static_cast<size_t>(n));
            return status::ok();
        };
        return cache::external_arena{mem.data(), bytes, write, read};
    }
};

std::unique_ptr<cache::page_pool> device_pool(const cache::layout_spec& l, fake_device& dev, int64_t pages) {
    const int64_t budget = cache::pool_geometry(l, pages, 2).total_bytes() +
                           cache::pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    auto r = cache::page_pool::create_external(l, {budget, 2}, dev.arena(budget));
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    return std::move(*r);
}

struct device_pd {
    cache::layout_spec layout = tiny_layout();
    fake_device prefill_dev, decode_dev;
    std::unique_ptr<cache::page_pool> prefill = device_pool(layout, prefill_dev, 8);
    std::unique_ptr<cache::page_pool> decode = device_pool(layout, decode_dev, 8);
    int64_t tokens = layout.page_size() + 17;
    cache::slot_ref src_slot, dst_slot;
    std::vector<int64_t> src_pages;
    prefill_job_msg job;
    std::vector<pd_message> msgs;
    sent_transfer sent;

    device_pd() {
        std::mt19937_64 rng{11};
        dst_slot = decode->alloc_sequence(1);
        REQUIRE(decode->ensure_capacity(dst_slot, tokens));
        job.request_id = 1;
        job.token_ids.assign(static_cast<size_t>(tokens), 5);
        auto table = decode->page_table(dst_slot);
        job.pages.assign(table.begin(), table.end());
        job.slot = dst_slot;
        src_slot = prefill->alloc_sequence(101);
        REQUIRE(prefill->ensure_capacity(src_slot, tokens));
        fill_random(*prefill, src_slot, rng);  // the fake device's memory is host memory
        for (const auto& p : prefill->page_table(src_slot)) src_pages.push_back(p.page);
        auto r = send_transfer(*prefill, src_pages, src_slot.slot, job, [&](pd_message&& m) {
            msgs.push_back(std::move(m));
            return status::ok();
        });
        REQUIRE_MESSAGE(r.is_ok(), r.error().message());
        sent = *r;
    }
};

status apply(transfer_tracker& t, cache::page_pool& pool, const pd_message& m) {
    if (auto* w = std::get_if<page_write_msg>(&m)) return t.apply(pool, *w);
    return t.apply(pool, std::get<state_write_msg>(m));
}

}  // namespace

TEST_CASE("pd_transfer over device pools: read through the reader, landed and re-checked through the writer") {
    device_pd f;
    CHECK(f.prefill_dev.reads == static_cast<int64_t>(f.msgs.size()));  // one read per span, nothing direct
    transfer_tracker t(*f.decode, 1, f.job.pages, f.job.slot, f.tokens, 1000);
    const int64_t writes_before = f.decode_dev.writes;  // the slot's state reset at alloc
    for (const pd_message& m : f.msgs) REQUIRE(apply(t, *f.decode, m).is_ok());
    CHECK(f.decode_dev.writes - writes_before == static_cast<int64_t>(f.msgs.size()));
    CHECK(f.decode_dev.reads == static_cast<int64_t>(f.msgs.size()));  // every landed write read back
    prefill_done_msg done;
    done.request_id = 1;
    done.writes_sent = f.sent.writes;
    done.transfer_checksum = f.sent.checksum;
    REQUIRE(t.finish(done).is_ok());
    // Byte-exact where the bytes landed.
    std::vector<cache::page_move> moves;
    for (size_t i = 0; i < f.src_pages.size(); ++i) moves.push_back({f.src_pages[i], f.job.pages[i]});
    auto plan = cache::plan_transfer(f.prefill->geometry(), f.decode->geometry(), moves, f.tokens,
                                     f.src_slot.slot, f.dst_slot);
    CHECK(cache::verify_spans(plan, f.decode->arena(), cache::checksum_spans(plan, f.prefill->arena())).is_ok());
}

TEST_CASE("pd_transfer over device pools: a write that lands damaged fails the request as data_loss") {
    for (const bool history : {true, false}) {
        CAPTURE(history);
        device_pd f;
        size_t victim = 0;
        while (std::holds_alternative<page_write_msg>(f.msgs[victim]) != history) ++victim;
        transfer_tracker t(*f.decode, 1, f.job.pages, f.job.slot, f.tokens, 1000);
        f.decode_dev.damage_write = f.decode_dev.writes + static_cast<int64_t>(victim);
        for (size_t i = 0; i < victim; ++i) REQUIRE(apply(t, *f.decode, f.msgs[i]).is_ok());
        const status st = apply(t, *f.decode, f.msgs[victim]);
        REQUIRE_FALSE(st.is_ok());
        CHECK(st.code() == error_code::data_loss);
        CHECK(st.message().find("after the bytes landed in the device pool") != std::string::npos);
        CHECK(t.failed());
        CHECK(t.stats().checksum_failures == 1);
        CHECK_FALSE(t.complete());
    }
}

TEST_CASE("page_pool read_bytes / write_bytes: memcpy on a host pool, the arena's functions on a device pool") {
    cache::layout_spec l = tiny_layout();
    auto host = cache::testing::make_pool(l, 4, 2);
    const std::byte in[5] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};
    std::byte out[5] = {};
    REQUIRE(host->write_bytes(host->arena() + 64, in, 5).is_ok());
    REQUIRE(host->read_bytes(out, host->arena() + 64, 5).is_ok());
    CHECK(std::memcmp(in, out, 5) == 0);

    fake_device dev;
    auto ext = device_pool(l, dev, 4);
    const int64_t w0 = dev.writes;
    REQUIRE(ext->write_bytes(ext->arena() + 64, in, 5).is_ok());
    std::byte back[5] = {};
    REQUIRE(ext->read_bytes(back, ext->arena() + 64, 5).is_ok());
    CHECK(std::memcmp(in, back, 5) == 0);
    CHECK(dev.writes == w0 + 1);
    CHECK(dev.reads == 1);

    // An external arena without a reader serves the forward but refuses to be read back.
    const int64_t budget = cache::pool_geometry(l, 4, 2).total_bytes() +
                           cache::pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    fake_device blind;
    cache::external_arena a = blind.arena(budget);
    a.read = nullptr;
    auto no_reader = cache::page_pool::create_external(l, {budget, 2}, a);
    REQUIRE(no_reader.is_ok());
    const status st = (*no_reader)->read_bytes(back, (*no_reader)->arena(), 5);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("no reader") != std::string::npos);
}
