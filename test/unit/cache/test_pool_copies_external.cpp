// The prefix cache's byte paths over an external arena (a GPU slab in production): snapshot
// capture and restore, the host tier's write-through and layer-by-layer load, and the gate's
// sentinel check reach pool bytes only through page_pool::read_bytes / write_bytes. The stand-in
// device stores every byte XOR-masked, so any path that read or wrote the arena directly would see
// or leave masked bytes and fail the equality checks against a host pool holding the same state.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "cache/host_tier.h"
#include "cache/layer_gate.h"
#include "cache/page_pool.h"
#include "cache/snapshot.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;
using namespace tandem::cache::testing;

namespace {

constexpr std::byte k_mask{0xa5};

struct masked_device {
    std::vector<std::byte> mem;
    external_arena arena(int64_t bytes) {
        mem.assign(static_cast<size_t>(bytes), k_mask);  // reads as zeros
        auto write = [](std::byte* dst, const std::byte* src, int64_t n) {
            for (int64_t i = 0; i < n; ++i) dst[i] = src[i] ^ k_mask;
            return status::ok();
        };
        auto read = [](std::byte* dst, const std::byte* src, int64_t n) {
            for (int64_t i = 0; i < n; ++i) dst[i] = src[i] ^ k_mask;
            return status::ok();
        };
        return external_arena{mem.data(), bytes, write, read};
    }
};

int64_t budget_for(const layout_spec& l, int64_t pages, int64_t slots) {
    return pool_geometry(l, pages, slots).total_bytes() +
           pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
}

std::vector<std::byte> random_bytes(int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::byte> v(static_cast<size_t>(n));
    for (auto& b : v) b = std::byte(rng() & 0x7f);  // finite floats in the compressor rings
    return v;
}

std::vector<std::byte> read_all(const page_pool& p, const std::byte* at, int64_t n) {
    std::vector<std::byte> out(static_cast<size_t>(n));
    REQUIRE(p.read_bytes(out.data(), at, n).is_ok());
    return out;
}

// The same logical state in a host pool and a device pool: one slot and one sealed page.
struct twin_pools {
    layout_spec layout = make_layout(load_model("tiny-ci-native.json"), kv_dtype::fp8, index_k_dtype::fp4, k_page);
    masked_device dev;
    std::unique_ptr<page_pool> host = make_pool(layout, 4, 3);
    std::unique_ptr<page_pool> device;
    slot_ref host_slot, dev_slot;
    page_ref host_page, dev_page;

    twin_pools() {
        auto d = page_pool::create_external(layout, {budget_for(layout, 4, 3), 3}, dev.arena(budget_for(layout, 4, 3)));
        REQUIRE_MESSAGE(d.is_ok(), d.error().message());
        device = std::move(*d);
        host_slot = host->alloc_sequence(1);
        dev_slot = device->alloc_sequence(1);
        const int64_t stride = host->geometry().slot_stride();
        const auto state = random_bytes(stride, 3);
        std::memcpy(host->slot_bytes_for_write(host_slot), state.data(), state.size());
        REQUIRE(device->write_bytes(device->slot_bytes_for_write(dev_slot), state.data(), stride).is_ok());
        host_page = host->alloc_page(1);
        dev_page = device->alloc_page(1);
        for (int32_t b = 0; b < int32_t(layout.buffers().size()); ++b) {
            const int64_t n = layout.buffers()[size_t(b)].bytes_per_page;
            const auto bytes = random_bytes(n, 10 + uint64_t(b));
            std::memcpy(host->page_bytes_for_write(host_page, b), bytes.data(), bytes.size());
            REQUIRE(device->write_bytes(device->page_bytes_for_write(dev_page, b), bytes.data(), n).is_ok());
        }
        host->seal_page(host_page);
        device->seal_page(dev_page);
    }
};

std::vector<int32_t> tokens(int64_t n) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(i * 31 % 4000));
    return t;
}

}  // namespace

TEST_CASE("pool copies over a device arena: snapshot capture and restore equal the host pool's") {
    twin_pools f;
    const auto toks = tokens(2 * k_page);
    const boundary_snapshot from_host = capture_snapshot(*f.host, f.host_slot, toks, 9);
    const boundary_snapshot from_dev = capture_snapshot(*f.device, f.dev_slot, toks, 9);
    CHECK(from_dev.payload == from_host.payload);
    CHECK(verify_snapshot(f.layout, from_dev, toks, 9).is_ok());

    const slot_ref h2 = f.host->alloc_sequence(2), d2 = f.device->alloc_sequence(2);
    f.host->reset_sequence_state(h2);
    f.device->reset_sequence_state(d2);
    REQUIRE(restore_snapshot(*f.host, h2, from_host).is_ok());
    REQUIRE(restore_snapshot(*f.device, d2, from_dev).is_ok());
    const int64_t stride = f.host->geometry().slot_stride();
    const auto restored = read_all(*f.device, f.device->slot_bytes(d2.slot), stride);
    CHECK(std::memcmp(restored.data(), f.host->slot_bytes(h2.slot), size_t(stride)) == 0);
}

TEST_CASE("pool copies over a device arena: the host tier stores and loads through the arena, sentinel checked through it") {
    twin_pools f;
    host_tier_test_hooks hooks;
    hooks.sentinel = true;  // load destinations are written with the sentinel and checked by the gate
    const int64_t host_bytes = 2 * f.layout.page_group_bytes() +
                               int64_t(f.layout.buffers().size()) * pool_geometry::k_region_alignment;
    auto tier = host_tier::create(*f.device, {host_bytes, nullptr, hooks});
    REQUIRE_MESSAGE(tier.is_ok(), tier.error().message());
    const int32_t hp = (*tier)->alloc_page();
    (*tier)->store(f.dev_page, hp);
    (*tier)->drain();
    REQUIRE((*tier)->present(hp));

    const slot_ref dst = f.device->alloc_sequence(3);
    f.device->reset_sequence_state(dst);
    const page_ref p = f.device->alloc_page(3);
    f.device->append_page(dst, p);
    const std::vector<page_load> loads{{hp, p}};
    auto ticket = (*tier)->load(loads, dst, nullptr);
    const layer_gate gate(*f.device, {ticket});
    for (int32_t l = 0; l < int32_t(f.layout.num_layers()); ++l) {
        auto view = gate.wait(l);
        REQUIRE_MESSAGE(view, view.error().message());
    }
    for (int32_t b = 0; b < int32_t(f.layout.buffers().size()); ++b) {
        CAPTURE(b);
        const int64_t n = f.layout.buffers()[size_t(b)].bytes_per_page;
        const auto loaded = read_all(*f.device, f.device->page_bytes(p.page, b), n);
        CHECK(std::memcmp(loaded.data(), f.host->page_bytes(f.host_page.page, b), size_t(n)) == 0);
    }
    (*tier)->free_page(hp);
}
