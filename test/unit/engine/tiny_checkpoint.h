// A generated tiny checkpoint in a temporary directory, removed afterwards (tests that run the
// real CPU model).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>

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

}  // namespace tandem::engine::test
