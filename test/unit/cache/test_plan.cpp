// `tandem plan`: the numbers for Flash and Pro in every production dtype combination,
// read back from the JSON the command prints; budget resolution and errors.
#include <doctest/doctest.h>

#include <simdjson.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cache/plan_command.h"
#include "core/config.h"
#include "test_helpers.h"

using namespace tandem;
using namespace tandem::cache;

namespace {

config base_config(const char* model_file, const char* kv, const char* idx) {
    auto c = apply_toml(config{}, default_config_toml(), "<defaults>");
    REQUIRE_MESSAGE(c.is_ok(), c.error().message());
    config cfg = *c;
    cfg.model.path = std::string(TANDEM_SOURCE_ROOT) + "/test/golden/model/configs/" + model_file;
    cfg.cache.kv_dtype = kv;
    cfg.cache.index_k_dtype = idx;
    cfg.cache.page_size = 256;
    cfg.cache.memory_bytes = int64_t{80} << 30;  // an 80 GiB budget
    cfg.scheduler.max_running_requests = 64;
    return cfg;
}

}  // namespace

TEST_CASE("plan: --json sizes for Flash and Pro in every production dtype combination") {
    struct idx_want { const char* name; int64_t row; int64_t page; };
    struct kv_want { const char* name; int64_t row; };
    for (const char* model : {"deepseek-v4-flash.json", "deepseek-v4-pro.json"}) {
        for (kv_want kv : {kv_want{"fp8", 584}, {"bf16", 1024}}) {
            for (idx_want idx : {idx_want{"fp8", 132, 8448}, {"bf16", 256, 16384}, {"fp4", 68, 4352}}) {
                CAPTURE(model);
                CAPTURE(kv.name);
                CAPTURE(idx.name);
                auto plan = make_cache_plan(base_config(model, kv.name, idx.name));
                REQUIRE_MESSAGE(plan.is_ok(), plan.error().message());
                const std::string text = render_plan_json(*plan);
                simdjson::dom::parser parser;
                simdjson::dom::element j;
                REQUIRE(parser.parse(text).get(j) == simdjson::SUCCESS);
                auto ik = j["buffer_kinds"]["index_k"];
                CHECK(int64_t(ik["bytes_per_row"]) == idx.row);
                CHECK(int64_t(ik["rows_per_page"]) == 64);
                CHECK(int64_t(ik["bytes_per_page"]) == idx.page);
                CHECK(int64_t(j["buffer_kinds"]["compressed_kv_csa"]["bytes_per_row"]) == kv.row);
                CHECK(int64_t(j["buffer_kinds"]["compressed_kv_csa"]["rows_per_page"]) == 64);
                CHECK(int64_t(j["buffer_kinds"]["compressed_kv_hca"]["bytes_per_row"]) == kv.row);
                CHECK(int64_t(j["buffer_kinds"]["compressed_kv_hca"]["rows_per_page"]) == 2);
                CHECK(int64_t(j["state_kinds"]["window"]["bytes_per_row"]) == kv.row);
                CHECK(std::string_view(j["fingerprint"]) == plan->layout.fingerprint_hex());
                const double bpt = double(j["bytes_per_token"]);
                CHECK(bpt == plan->layout.bytes_per_token());
                if (std::string(kv.name) == "fp8" && std::string(idx.name) == "fp8") {
                    const double want = std::string(model) == "deepseek-v4-flash.json" ? 3850 : 5511;
                    CHECK(std::fabs(bpt - want) < 1.0);
                }
                CHECK(int64_t(j["budget"]["sequence_slots"]) == 64);
                CHECK(int64_t(j["budget"]["tokens"]) == int64_t(j["budget"]["pages"]) * 256);
            }
        }
    }
}

TEST_CASE("plan: text summary names every buffer kind and the budget") {
    auto plan = make_cache_plan(base_config("deepseek-v4-flash.json", "fp8", "fp8"));
    REQUIRE(plan.is_ok());
    const std::string text = render_plan_text(*plan);
    for (const char* s : {"compressed_kv_csa", "compressed_kv_hca", "index_k", "window",
                          "attn_compressor_csa", "attn_compressor_hca", "index_compressor",
                          "3850.2500", "985664", "64 sequence slots"}) {
        CHECK_MESSAGE(text.find(s) != std::string::npos, s);
    }
    // 80 GiB: pages hold (budget - 64 slots) / 985664 B.
    const int64_t slot = pool_geometry(plan->layout, 0, 1).slot_stride();
    CHECK(plan->split.num_pages <= ((int64_t{80} << 30) - 64 * slot) / 985664);
    CHECK(plan->split.num_pages >= ((int64_t{80} << 30) - 64 * slot) / 985664 - 1);
}

TEST_CASE("plan: budget resolution and configuration errors") {
    CHECK(resolve_memory_budget(12345, 0.5).value() == 12345);
    auto frac = resolve_memory_budget(0, 0.25);
    REQUIRE(frac.is_ok());
    CHECK(*frac > 0);
    CHECK_FALSE(resolve_memory_budget(0, 0.0).is_ok());

    config cfg = base_config("deepseek-v4-flash.json", "fp8", "fp8");
    cfg.cache.memory_bytes = 1 << 20;  // 1 MiB cannot hold 64 slots
    auto small = make_cache_plan(cfg);
    REQUIRE_FALSE(small.is_ok());
    CHECK(small.error().message().find("cache.memory_bytes") != std::string::npos);
    // The plan command still prints the layout and says what does not fit (exit 0).
    auto reported = make_cache_plan(cfg, true);
    REQUIRE(reported.is_ok());
    CHECK(reported->split.num_slots == 0);
    CHECK(reported->does_not_fit.find("max_running_requests") == std::string::npos);  // not even one slot fits
    CHECK(reported->does_not_fit.find("cache.memory_bytes >= ") != std::string::npos);
    CHECK(run_plan_command(cfg, true) == 0);

    cfg = base_config("deepseek-v4-flash.json", "fp8", "int8");
    auto bad = make_cache_plan(cfg);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("cache.index_k_dtype") != std::string::npos);

    cfg = base_config("missing.json", "fp8", "fp8");
    auto missing = make_cache_plan(cfg);
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.error().message().find("missing.json") != std::string::npos);

    cfg.model.path = "/some/dir";
    CHECK(model_config_path(cfg) == "/some/dir/config.json");
}

TEST_CASE("plan: on the device backend no CPU step buffers are counted, and a GPU-sized pool is not guessed") {
    config cfg = base_config("deepseek-v4-flash.json", "fp8", "fp8");
    auto cpu = make_cache_plan(cfg);
    REQUIRE(cpu.is_ok());
    CHECK(cpu->step.buffers.total() > 0);
    CHECK(render_plan_text(*cpu).find("CPU forward step buffers") != std::string::npos);
    cfg.backend.device = "cuda";
    auto device = make_cache_plan(cfg);
    REQUIRE(device.is_ok());
    CHECK(device->step.buffers.total() == 0);
    CHECK(device->memory_bytes == cfg.cache.memory_bytes);
    CHECK(render_plan_text(*device).find("CPU forward step buffers") == std::string::npos);
    cfg.cache.memory_bytes = 0;  // phase 0 sizes it from the GPU at startup
    auto unknown = make_cache_plan(cfg);
    REQUIRE_FALSE(unknown.is_ok());
    CHECK(unknown.error().message().find("cache.memory_bytes = 0 with backend.device = \"cuda\"") != std::string::npos);
    cfg.backend.test_emulate_device = true;  // the host emulation's "device" is host memory: the host rule
    CHECK(make_cache_plan(cfg).is_ok());
}

TEST_CASE("plan: run_plan_command prints the JSON plan on stdout") {
    config cfg = base_config("deepseek-v4-pro.json", "fp8", "fp8");
    char path[] = "/tmp/tandem_plan_test_XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    std::fflush(stdout);
    const int saved = dup(1);
    dup2(fd, 1);
    const int rc = run_plan_command(cfg, true);
    std::fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(fd);
    CHECK(rc == 0);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    unlink(path);
    simdjson::dom::parser parser;
    simdjson::dom::element j;
    REQUIRE(parser.parse(text.str()).get(j) == simdjson::SUCCESS);
    CHECK(std::fabs(double(j["bytes_per_token"]) - 5511) < 1.0);
    CHECK(int64_t(j["buffer_kinds"]["index_k"]["bytes_per_page"]) == 8448);
    CHECK(int64_t(j["layers"]) == 62);
}
