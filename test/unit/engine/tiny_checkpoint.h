// A generated tiny checkpoint in a temporary directory, removed afterwards (tests that run the
// real CPU model), and the pool budget that gives the tiny model an exact number of pages.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "cache/page_pool.h"
#include "cache/plan_command.h"
#include "core/config.h"
#include "model/make_model.h"

namespace tandem::engine::test {

struct tiny_checkpoint {
    std::filesystem::path dir;
    explicit tiny_checkpoint(uint64_t seed = 5) {
        dir = std::filesystem::temp_directory_path() /
              ("tandem_engine_tiny_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        auto cfg = model::preset_config("tiny");
        REQUIRE(cfg);
        model::make_model_options opt;
        opt.seed = seed;
        status st = model::write_random_checkpoint(*cfg, dir.string(), opt);
        REQUIRE_MESSAGE(st.is_ok(), st.message());
    }
    ~tiny_checkpoint() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
};

// The cache.memory_bytes with which config `c` serving the tiny preset gets exactly `slots`
// sequence slots and `pages` pages (for tests that need page pressure: preemption).
inline int64_t tiny_pool_bytes_for(const config& c, int64_t slots, int64_t pages) {
    auto mc = model::preset_config("tiny");
    REQUIRE(mc);
    auto lo = cache::layout_options_from(c);
    REQUIRE(lo);
    auto layout = cache::layout_spec::create(*mc, *lo);
    REQUIRE(layout);
    int64_t budget = int64_t{16} << 20;
    for (int i = 0; i < 3; ++i) {  // the split's fixed parts depend on the budget: converge
        auto split = cache::plan_pool_split(*layout, {budget, slots});
        REQUIRE(split);
        budget += (pages - split->num_pages) * layout->page_group_bytes();
    }
    return budget;
}

}  // namespace tandem::engine::test
