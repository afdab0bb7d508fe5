// Phase-0 device memory planning (cuda/host/device_memory_plan.h) on a generated FP8 checkpoint.
#include <doctest/doctest.h>

#include <cstdio>

#include "cache/layout.h"
#include "cuda/host/device_memory_plan.h"
#include "model/model_test_util.h"

using namespace tandem;
using namespace tandem::cuda;

namespace {

struct fixture {
    model::testing::temp_dir dir{"cuda_plan"};
    model::checkpoint ck;
    std::unique_ptr<cache::layout_spec> layout;
    fixture() {
        model::testing::make_checkpoint("tiny-fp8", 7, dir.str());
        auto c = model::checkpoint::open_dir(dir.str());
        REQUIRE(c.is_ok());
        ck = std::move(c.value());
        auto cfg = model::load_model_config(dir.str() + "/config.json");
        REQUIRE(cfg.is_ok());
        auto l = cache::layout_spec::create(*cfg, {cache::kv_dtype::fp8, cache::index_k_dtype::fp4, 256});
        REQUIRE(l.is_ok());
        layout = std::make_unique<cache::layout_spec>(std::move(l.value()));
    }
};

}  // namespace

TEST_CASE("weights go to the device as stored: every tensor once, aligned, never expanded") {
    fixture f;
    cache::pool_geometry g(*f.layout, 40, 3);
    auto p = plan_device_memory(f.ck, g, 1 << 20);
    REQUIRE(p.is_ok());
    REQUIRE(p->tensors.size() == f.ck.tensors().size());
    int64_t end = 0, fp8_tensors = 0;
    for (const device_tensor& t : p->tensors) {
        CHECK(t.offset % device_memory_plan::k_tensor_alignment == 0);
        CHECK(t.offset >= end);  // no overlap
        CHECK(t.bytes == t.source->nbytes);
        if (t.source->type == model::dtype::f8_e4m3) {
            ++fp8_tensors;
            CHECK(t.bytes == t.source->numel());  // one byte per element on the GPU too
        }
        end = t.offset + t.bytes;
    }
    CHECK(fp8_tensors > 0);  // the preset really stores FP8
    CHECK(p->stored_weight_bytes == f.ck.total_bytes());
    CHECK(p->weight_bytes >= end);
    CHECK(p->weight_bytes <= p->stored_weight_bytes +
                                 device_memory_plan::k_tensor_alignment * static_cast<int64_t>(p->tensors.size()));
    REQUIRE(p->find(p->tensors.front().name) == &p->tensors.front());
    CHECK(p->find("no.such.tensor") == nullptr);
}

TEST_CASE("the device pool is the host pool's geometry plus mirrored epochs, int64 throughout") {
    fixture f;
    cache::pool_geometry small(*f.layout, 40, 3), big(*f.layout, 80, 3);
    auto a = plan_device_memory(f.ck, small, 0);
    auto b = plan_device_memory(f.ck, big, 0);
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    CHECK(a->arena_bytes == small.total_bytes());
    CHECK(a->num_pages == 40);
    CHECK(a->epoch_offset >= a->arena_bytes);
    CHECK(a->epoch_offset % device_memory_plan::k_tensor_alignment == 0);
    CHECK(a->pool_bytes >= a->epoch_offset + 40 * 4);
    // 40 more pages cost exactly 40 pages of history plus their epochs (up to alignment).
    const int64_t grow = b->pool_bytes - a->pool_bytes;
    CHECK(grow >= 40 * f.layout->page_group_bytes() + 40 * 4 - device_memory_plan::k_tensor_alignment);
    CHECK(grow <= 40 * f.layout->page_group_bytes() + 40 * 4 + 2 * device_memory_plan::k_tensor_alignment +
                      2 * cache::pool_geometry::k_region_alignment * static_cast<int64_t>(f.layout->buffers().size()));
    // A pool far beyond 4 GiB keeps exact int64 sizes.
    cache::pool_geometry huge(*f.layout, int64_t{1} << 22, 1);
    auto h = plan_device_memory(f.ck, huge, 0);
    REQUIRE(h.is_ok());
    CHECK(h->arena_bytes == huge.total_bytes());
    CHECK(h->arena_bytes > (int64_t{1} << 32));
}

TEST_CASE("a plan that does not fit is refused with the numbers and what to change") {
    fixture f;
    cache::pool_geometry g(*f.layout, 40, 3);
    auto p = plan_device_memory(f.ck, g, 4096);
    REQUIRE(p.is_ok());
    CHECK(check_device_fit(*p, p->total_bytes(), "GPU-X").is_ok());
    status pool_short = check_device_fit(*p, p->total_bytes() - 1, "GPU-X");
    REQUIRE_FALSE(pool_short.is_ok());
    CHECK(pool_short.code() == error_code::out_of_range);
    CHECK(pool_short.message().find("GPU-X") != std::string::npos);
    CHECK(pool_short.message().find("cache.memory_bytes") != std::string::npos);
    status weights_short = check_device_fit(*p, p->weight_bytes / 2, "GPU-X");
    REQUIRE_FALSE(weights_short.is_ok());
    CHECK(weights_short.message().find("weights alone do not fit") != std::string::npos);
    CHECK(describe_device_memory(*p).find("tensors as stored") != std::string::npos);
    CHECK_FALSE(plan_device_memory(f.ck, g, -1).is_ok());
}

TEST_CASE("pd role both on one device: one copy of the weights, a pool and scratch per engine") {
    fixture f;
    cache::pool_geometry g(*f.layout, 40, 3);
    auto one = plan_device_memory(f.ck, g, 4096);
    auto two = plan_device_memory(f.ck, g, 4096, 2);
    REQUIRE(one.is_ok());
    REQUIRE(two.is_ok());
    CHECK(two->engines == 2);
    CHECK(two->weight_bytes == one->weight_bytes);  // uploaded once, shared by both engines
    CHECK(two->total_bytes() == one->weight_bytes + 2 * (one->pool_bytes + one->scratch_bytes));
    CHECK(check_device_fit(*two, two->total_bytes(), "GPU-X").is_ok());
    // What fits one engine does not fit two.
    status short_of_two = check_device_fit(*two, one->total_bytes(), "GPU-X");
    REQUIRE_FALSE(short_of_two.is_ok());
    CHECK(short_of_two.message().find("2 × pool") != std::string::npos);
    CHECK(short_of_two.message().find("each engine's") != std::string::npos);
    // The suggested budget is each engine's: half of what the weights leave, less its scratch and the
    // epochs' overhead (one engine's figure would not fit twice).
    const int64_t free_bytes = one->total_bytes();
    const int64_t each = (free_bytes - two->weight_bytes) / 2 - two->scratch_bytes - (two->pool_bytes - two->arena_bytes);
    char want[64];
    std::snprintf(want, sizeof want, "at most %.1f MiB", static_cast<double>(each) / (1 << 20));
    CHECK_MESSAGE(short_of_two.message().find(want) != std::string::npos, short_of_two.message());
    CHECK(describe_device_memory(*two).find("each for 2 engines") != std::string::npos);
    CHECK_FALSE(plan_device_memory(f.ck, g, 4096, 0).is_ok());
}

TEST_CASE("cache.memory_bytes = 0 on a GPU: each engine's pool is a fraction of the free memory the weights and scratch leave") {
    fixture f;
    cache::pool_geometry g(*f.layout, 40, 3);
    auto p = plan_device_memory(f.ck, g, 4096);
    REQUIRE(p.is_ok());
    CHECK(*device_weight_bytes(f.ck) == p->weight_bytes);  // the same slab, without planning a pool
    const int64_t w = p->weight_bytes, scratch = int64_t{8} << 20, free_bytes = w + (int64_t{1} << 30);
    auto one = device_pool_budget(free_bytes, w, scratch, 1, 0.5);
    REQUIRE(one.is_ok());
    CHECK(*one == ((int64_t{1} << 30) - scratch) / 2);
    // Role both: the weights once, a scratch per engine, the rest split in two.
    auto two = device_pool_budget(free_bytes, w, scratch, 2, 0.5);
    REQUIRE(two.is_ok());
    CHECK(*two == ((int64_t{1} << 30) - 2 * scratch) / 4);
    CHECK(w + 2 * (*two + scratch) <= free_bytes);
    // Nothing left after the weights: refused with the numbers, not a zero or negative pool.
    auto none = device_pool_budget(w + scratch, w, scratch, 1, 0.5);
    REQUIRE_FALSE(none.is_ok());
    CHECK(none.error().code() == error_code::out_of_range);
    CHECK(none.error().message().find("cache.memory_bytes = 0") != std::string::npos);
    CHECK_FALSE(device_pool_budget(free_bytes, w, scratch, 0, 0.5).is_ok());
    CHECK_FALSE(device_pool_budget(free_bytes, w, scratch, 1, 0.0).is_ok());
    CHECK_FALSE(device_pool_budget(free_bytes, w, scratch, 1, 1.5).is_ok());
}
