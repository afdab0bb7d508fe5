// Shared helpers for the cache unit tests: the Flash/Pro/tiny model configs from test/golden, a
// pool sized in pages and slots, and the tiny model's pool most tests start from.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "model/model_config.h"
#include "tandem_build_config.h"

namespace tandem::cache::testing {

inline model::model_config load_model(const char* file) {
    auto r = model::load_model_config(std::string(TANDEM_SOURCE_ROOT) +
                                      "/test/golden/model/configs/" + file);
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    return *r;
}

inline layout_spec make_layout(const model::model_config& m, kv_dtype kv, index_k_dtype idx,
                               int64_t page_size = 256) {
    auto r = layout_spec::create(m, layout_options{kv, idx, page_size});
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    return *r;
}

// A pool of exactly `pages` pages and `slots` sequence slots (plus the regions' alignment).
inline std::unique_ptr<page_pool> make_pool(const layout_spec& l, int64_t pages, int64_t slots) {
    const int64_t bytes = pool_geometry(l, pages, slots).total_bytes() +
                          pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    auto r = page_pool::create(l, {bytes, slots});
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    REQUIRE((*r)->stats().pages_total == pages);
    return std::move(*r);
}

// The page size of the pool_fixture tests: small, so a few hundred tokens span several pages.
inline constexpr int64_t k_page = 128;

// The tiny CI model's layout for the given dtypes and a pool over it.
struct pool_fixture {
    model::model_config model = load_model("tiny-ci-native.json");
    layout_spec layout;
    std::unique_ptr<page_pool> pool;
    explicit pool_fixture(kv_dtype kv = kv_dtype::fp8, index_k_dtype idx = index_k_dtype::fp8,
                          int64_t pages = 16, int64_t slots = 4)
        : layout(make_layout(model, kv, idx, k_page)), pool(make_pool(layout, pages, slots)) {}
};

inline constexpr kv_dtype k_all_kv[] = {kv_dtype::fp8, kv_dtype::bf16, kv_dtype::fp32};
inline constexpr index_k_dtype k_all_idx[] = {index_k_dtype::fp8, index_k_dtype::bf16,
                                              index_k_dtype::fp4, index_k_dtype::fp32};

}  // namespace tandem::cache::testing
