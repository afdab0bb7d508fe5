#include <doctest/doctest.h>

#include <fmt/format.h>

#include <fstream>
#include <string>

#include "core/config.h"
#include "core/config_schema.h"

using namespace tandem;

namespace {

config defaults() {
    auto cfg = load_config({});
    REQUIRE(cfg);
    return *cfg;
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("config: the embedded etc/tandem.toml sets every declared key") {
    // Text scan per section: a key absent from the file would silently default to zero.
    std::string text(default_config_toml());
    for (const auto& f : config_schema::fields()) {
        std::string section_header = fmt::format("[{}]", f.section);
        size_t at = text.find(section_header);
        REQUIRE_MESSAGE(at != std::string::npos, "missing section " << section_header);
        size_t next = text.find("\n[", at + 1);
        std::string body = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
        CHECK_MESSAGE(contains(body, fmt::format("\n{} ", f.key)),
                      "etc/tandem.toml does not set " << f.section << "." << f.key);
    }
}

TEST_CASE("config: defaults load and match the shipped file") {
    config cfg = defaults();
    CHECK(cfg.server.port == 8000);
    CHECK(cfg.cache.page_size == 256);
    CHECK(cfg.topology.mode == "single");
}

TEST_CASE("config: a file overrides defaults, flags override the file, --set comes last") {
    std::string path = "/tmp/tandem_test_config.toml";
    std::ofstream(path) << "[server]\nport = 9100\n[cache]\npage_size = 512\n";
    config_sources src;
    src.file = path;
    src.flag_overrides = {"server.port=9200"};
    src.set_overrides = {"server.port=9300", "cache.kv_dtype=fp8"};
    auto cfg = load_config(src);
    REQUIRE(cfg);
    CHECK(cfg->server.port == 9300);
    CHECK(cfg->cache.page_size == 512);
    CHECK(cfg->cache.kv_dtype == "fp8");
    CHECK(cfg->server.host == "127.0.0.1");  // untouched keys keep defaults
}

TEST_CASE("config: unknown key names the key and its line") {
    auto cfg = apply_toml(defaults(), "[server]\nport = 1\n\nprot = 2\n", "my.toml");
    REQUIRE_FALSE(cfg);
    CHECK(contains(cfg.error().message(), "my.toml:4"));
    CHECK(contains(cfg.error().message(), "unknown key 'server.prot'"));
    CHECK(contains(cfg.error().message(), "did you mean 'server.port'"));
}

TEST_CASE("config: unknown section, wrong type, range, multiple, choice") {
    auto section = apply_toml(defaults(), "[sever]\nport = 1\n", "f.toml");
    REQUIRE_FALSE(section);
    CHECK(contains(section.error().message(), "unknown section 'sever'"));

    auto type = apply_toml(defaults(), "[server]\nport = \"80\"\n", "f.toml");
    REQUIRE_FALSE(type);
    CHECK(contains(type.error().message(), "f.toml:2"));
    CHECK(contains(type.error().message(), "'server.port' must be integer"));

    auto range = apply_toml(defaults(), "[server]\nport = 70000\n", "f.toml");
    REQUIRE_FALSE(range);
    CHECK(contains(range.error().message(), "out of range"));
    CHECK(range.error().code() == error_code::out_of_range);

    auto multiple = apply_toml(defaults(), "[cache]\npage_size = 200\n", "f.toml");
    REQUIRE_FALSE(multiple);
    CHECK(contains(multiple.error().message(), "multiple of 128"));

    auto choice = apply_toml(defaults(), "[cache]\nindex_k_dtype = \"int4\"\n", "f.toml");
    REQUIRE_FALSE(choice);
    CHECK(contains(choice.error().message(), "\"int4\" is not one of"));

    auto frac = apply_toml(defaults(), "[cache]\nmemory_fraction = 1.5\n", "f.toml");
    CHECK_FALSE(frac);
    auto ok_int_for_real = apply_toml(defaults(), "[cache]\nmemory_fraction = 1\n", "f.toml");
    CHECK(ok_int_for_real);

    auto syntax = apply_toml(defaults(), "[server\nport = 1\n", "f.toml");
    REQUIRE_FALSE(syntax);
    CHECK(contains(syntax.error().message(), "invalid TOML"));

    auto not_table = apply_toml(defaults(), "server = 3\n", "f.toml");
    CHECK_FALSE(not_table);
}

TEST_CASE("config: --set values are parsed by the key's type") {
    config cfg = defaults();
    CHECK(apply_override(cfg, "logging.access_log=true", "--set"));
    CHECK(cfg.logging.access_log);
    CHECK(apply_override(cfg, "transport.peers=a:1,b:2", "--set"));
    CHECK(cfg.transport.peers == std::vector<std::string>{"a:1", "b:2"});
    CHECK(apply_override(cfg, "transport.peers=[\"h:1\", \"k:2\"]", "--set"));  // TOML spelling
    CHECK(cfg.transport.peers == std::vector<std::string>{"h:1", "k:2"});
    CHECK(apply_override(cfg, "model.served_name=\"x y\"", "--set"));
    CHECK(cfg.model.served_name == "x y");
    CHECK(apply_override(cfg, "cache.memory_fraction=0.25", "--set"));
    CHECK(cfg.cache.memory_fraction == doctest::Approx(0.25));
    CHECK_FALSE(apply_override(cfg, "server.port=12x", "--set"));
    CHECK_FALSE(apply_override(cfg, "server.port", "--set"));
    CHECK_FALSE(apply_override(cfg, "logging.access_log=yes", "--set"));
    auto st = apply_override(cfg, "nope.key=1", "--set");
    CHECK(contains(st.message(), "unknown key 'nope.key'"));
}

TEST_CASE("config: --print-config output loads back to the same configuration") {
    config cfg = defaults();
    REQUIRE(apply_override(cfg, "transport.peers=h1:1,h2:2", "t"));
    REQUIRE(apply_override(cfg, "cache.memory_fraction=0.3", "t"));
    std::string printed = config_to_toml(cfg);
    auto reloaded = apply_toml(config{}, printed, "printed");
    REQUIRE(reloaded);
    CHECK(config_to_toml(*reloaded) == printed);
    CHECK(reloaded->transport.peers == cfg.transport.peers);
}

TEST_CASE("config: a missing --config file is an error naming it") {
    config_sources src;
    src.file = "/nonexistent/tandem.toml";
    auto cfg = load_config(src);
    REQUIRE_FALSE(cfg);
    CHECK(contains(cfg.error().message(), "/nonexistent/tandem.toml"));
}
