#include <doctest/doctest.h>

#include "core/cli.h"

using namespace tandem;

TEST_CASE("cli: flags become config overrides in order") {
    auto opt = parse_cli({"--config", "x.toml", "--port", "9000", "--model=/m", "--topology", "pd",
                          "--set", "cache.page_size=512"});
    REQUIRE(opt);
    CHECK(opt->command == "serve");
    CHECK(opt->sources.file == "x.toml");
    CHECK(opt->sources.flag_overrides ==
          std::vector<std::string>{"server.port=9000", "model.path=/m", "topology.mode=pd"});
    CHECK(opt->sources.set_overrides == std::vector<std::string>{"cache.page_size=512"});
}

TEST_CASE("cli: subcommands and their flags") {
    auto plan = parse_cli({"plan", "--json"});
    REQUIRE(plan);
    CHECK(plan->command == "plan");
    CHECK(plan->json);
    auto mk = parse_cli({"make-model", "--preset", "tiny", "--out", "d", "--seed", "7"});
    REQUIRE(mk);
    CHECK(mk->preset == "tiny");
    CHECK(mk->out_dir == "d");
    CHECK(mk->seed == 7);
}

TEST_CASE("cli: errors name the flag") {
    auto missing = parse_cli({"--port"});
    REQUIRE_FALSE(missing);
    CHECK(missing.error().message().find("--port") != std::string::npos);
    auto unknown = parse_cli({"--bogus"});
    REQUIRE_FALSE(unknown);
    CHECK(unknown.error().message().find("--bogus") != std::string::npos);
    auto bad_cmd = parse_cli({"frobnicate"});
    REQUIRE_FALSE(bad_cmd);
    CHECK(bad_cmd.error().message().find("frobnicate") != std::string::npos);
    CHECK_FALSE(parse_cli({"make-model", "--seed", "-3"}));
}
