// Shared helpers for the cache unit tests: the Flash/Pro/tiny model configs from test/golden.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "cache/layout.h"
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

inline constexpr kv_dtype k_all_kv[] = {kv_dtype::fp8, kv_dtype::bf16, kv_dtype::fp32};
inline constexpr index_k_dtype k_all_idx[] = {index_k_dtype::fp8, index_k_dtype::bf16,
                                              index_k_dtype::fp4, index_k_dtype::fp32};

}  // namespace tandem::cache::testing
