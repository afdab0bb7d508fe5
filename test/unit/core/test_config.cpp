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

TEST_CASE("config: [transport] reconnect, frame limit, lease, nccl device and fault keys") {
    config d = defaults();
    CHECK(d.transport.reconnect_min_ms == 50);
    CHECK(d.transport.reconnect_max_ms == 2000);
    CHECK(d.transport.max_frame_bytes == int64_t{256} << 20);
    CHECK(d.transport.abort_lease_ms == 10000);
    CHECK(d.transport.nccl_device == 0);
    CHECK(d.transport.fault_delay_ms == 0);
    CHECK(d.transport.fault_stall_ms == 0);
    CHECK(d.transport.fault_stall_after_frames == 0);
    CHECK(d.transport.fault_drop_after_frames == 0);
    CHECK(d.transport.fault_corrupt_probability == 0.0);
    CHECK(d.transport.fault_abort_storm == 0);
    CHECK(d.transport.fault_seed == 1);

    config_sources src;
    src.set_overrides = {"transport.reconnect_min_ms=7",       "transport.reconnect_max_ms=70",
                         "transport.max_frame_bytes=65536",    "transport.abort_lease_ms=1234",
                         "transport.nccl_device=3",            "transport.fault_delay_ms=11",
                         "transport.fault_stall_ms=12",        "transport.fault_stall_after_frames=13",
                         "transport.fault_drop_after_frames=14",
                         "transport.fault_corrupt_probability=0.25",
                         "transport.fault_abort_storm=15",     "transport.fault_seed=16"};
    auto cfg = load_config(src);
    REQUIRE_MESSAGE(cfg, cfg.error().message());
    const transport_section& t = cfg->transport;
    CHECK(t.reconnect_min_ms == 7);
    CHECK(t.reconnect_max_ms == 70);
    CHECK(t.max_frame_bytes == 65536);
    CHECK(t.abort_lease_ms == 1234);
    CHECK(t.nccl_device == 3);
    CHECK(t.fault_delay_ms == 11);
    CHECK(t.fault_stall_ms == 12);
    CHECK(t.fault_stall_after_frames == 13);
    CHECK(t.fault_drop_after_frames == 14);
    CHECK(t.fault_corrupt_probability == doctest::Approx(0.25));
    CHECK(t.fault_abort_storm == 15);
    CHECK(t.fault_seed == 16);
}

TEST_CASE("config: out-of-range [transport] values are refused naming the key") {
    const char* bad[] = {"reconnect_min_ms = 0", "reconnect_max_ms = 0", "max_frame_bytes = 4095",
                         "abort_lease_ms = 0", "nccl_device = -1", "fault_delay_ms = -1",
                         "fault_stall_ms = -5", "fault_stall_after_frames = -1",
                         "fault_drop_after_frames = -1", "fault_corrupt_probability = 1.5",
                         "fault_corrupt_probability = -0.1", "fault_abort_storm = -1",
                         "fault_seed = -1"};
    for (const char* line : bad) {
        auto cfg = apply_toml(defaults(), fmt::format("[transport]\n{}\n", line), "t.toml");
        REQUIRE_FALSE_MESSAGE(cfg, line);
        std::string key(line, std::string_view(line).find(' '));
        CHECK_MESSAGE(contains(cfg.error().message(), "'transport." + key + "'"), line);
        CHECK(contains(cfg.error().message(), "out of range"));
    }
    auto edge = apply_toml(defaults(), "[transport]\nmax_frame_bytes = 4096\n"
                                       "fault_corrupt_probability = 1.0\n", "t.toml");
    CHECK(edge);
}

TEST_CASE("config: reconnect_max_ms below reconnect_min_ms is a load error naming both") {
    config_sources src;
    src.set_overrides = {"transport.reconnect_min_ms=500", "transport.reconnect_max_ms=100"};
    auto cfg = load_config(src);
    REQUIRE_FALSE(cfg);
    CHECK(contains(cfg.error().message(), "transport.reconnect_max_ms"));
    CHECK(contains(cfg.error().message(), "transport.reconnect_min_ms"));

    // Checked on the final values: raising max after min in the same run is fine.
    src.set_overrides = {"transport.reconnect_min_ms=5000", "transport.reconnect_max_ms=6000"};
    CHECK(load_config(src));
    src.set_overrides = {"transport.reconnect_min_ms=300", "transport.reconnect_max_ms=300"};
    CHECK(load_config(src));
}

TEST_CASE("config: peer_timeout_ms must exceed heartbeat_interval_ms; the error names both") {
    config_sources src;
    auto d = load_config(src);
    REQUIRE(d);
    CHECK(d->transport.heartbeat_interval_ms == 1000);
    CHECK(d->transport.peer_timeout_ms == 5000);
    src.set_overrides = {"transport.heartbeat_interval_ms=500", "transport.peer_timeout_ms=500"};
    auto cfg = load_config(src);
    REQUIRE_FALSE(cfg);
    CHECK(contains(cfg.error().message(), "transport.peer_timeout_ms"));
    CHECK(contains(cfg.error().message(), "transport.heartbeat_interval_ms"));
    src.set_overrides = {"transport.heartbeat_interval_ms=100", "transport.peer_timeout_ms=101"};
    CHECK(load_config(src));
}
