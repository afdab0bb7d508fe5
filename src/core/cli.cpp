#include "core/cli.h"

#include <fmt/format.h>

#include <charconv>

namespace tandem {
namespace {

status missing_value(const std::string& flag) {
    return make_error(error_code::invalid_argument, fmt::format("{} needs a value", flag));
}

}  // namespace

result<cli_options> parse_cli(const std::vector<std::string>& args) {
    cli_options opt;
    size_t i = 0;
    if (!args.empty() && !args[0].starts_with("-")) {
        opt.command = args[0];
        if (opt.command != "serve" && opt.command != "plan" && opt.command != "make-model") {
            return make_error(error_code::invalid_argument,
                              fmt::format("unknown command '{}' (serve, plan, make-model)",
                                          opt.command));
        }
        i = 1;
    }
    for (; i < args.size(); ++i) {
        const std::string& flag = args[i];
        // Flags that take no value.
        if (flag == "--help" || flag == "-h") { opt.help = true; continue; }
        if (flag == "--version") { opt.version = true; continue; }
        if (flag == "--print-config") { opt.print_config = true; continue; }
        if (flag == "--json") { opt.json = true; continue; }
        // Flags with a value: "--flag value" or "--flag=value".
        std::string name = flag, val;
        bool has_inline = false;
        if (size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
            name = flag.substr(0, eq);
            val = flag.substr(eq + 1);
            has_inline = true;
        }
        auto take = [&]() -> bool {
            if (has_inline) return true;
            if (i + 1 >= args.size()) return false;
            val = args[++i];
            return true;
        };
        auto config_override = [&](const char* key) {
            opt.sources.flag_overrides.push_back(fmt::format("{}={}", key, val));
        };
        if (name == "--config") {
            if (!take()) return missing_value(name);
            opt.sources.file = val;
        } else if (name == "--set") {
            if (!take()) return missing_value(name);
            opt.sources.set_overrides.push_back(val);
        } else if (name == "--topology") {
            if (!take()) return missing_value(name);
            config_override("topology.mode");
        } else if (name == "--role") {
            if (!take()) return missing_value(name);
            config_override("topology.role");
        } else if (name == "--model") {
            if (!take()) return missing_value(name);
            config_override("model.path");
        } else if (name == "--host") {
            if (!take()) return missing_value(name);
            config_override("server.host");
        } else if (name == "--port") {
            if (!take()) return missing_value(name);
            config_override("server.port");
        } else if (name == "--preset") {
            if (!take()) return missing_value(name);
            opt.preset = val;
        } else if (name == "--out") {
            if (!take()) return missing_value(name);
            opt.out_dir = val;
        } else if (name == "--tokenizer") {
            if (!take()) return missing_value(name);
            opt.tokenizer_dir = val;
        } else if (name == "--seed") {
            if (!take()) return missing_value(name);
            auto [end, ec] = std::from_chars(val.data(), val.data() + val.size(), opt.seed);
            if (ec != std::errc() || end != val.data() + val.size()) {
                return make_error(error_code::invalid_argument,
                                  fmt::format("--seed must be a non-negative integer, got '{}'", val));
            }
        } else {
            return make_error(error_code::invalid_argument,
                              fmt::format("unknown flag '{}' (see tandem --help)", flag));
        }
    }
    return opt;
}

std::string cli_usage() {
    return R"(tandem — serves DeepSeek-V4-class models behind an OpenAI-compatible HTTP API.

Usage:
  tandem [serve] [options]           run the server
  tandem plan [options] [--json]     print the KV/index-K pool layout and capacity (reads only
                                     the model's config.json)
  tandem make-model --preset NAME --out DIR [--seed S] [--tokenizer DIR]
                                     write a deterministic random-weight checkpoint

Options:
  --config FILE          TOML file; keys it sets override the built-in defaults
  --topology single|pd   same as --set topology.mode=...
  --role both|prefill|decode
                         same as --set topology.role=...
  --model DIR            same as --set model.path=DIR
  --host H, --port P     same as --set server.host=H / server.port=P
  --set section.key=value
                         override any key (repeatable; applied last, in order)
  --print-config         print the effective configuration as TOML and exit
  --version              print the version and exit
  -h, --help             this text

Exit codes: 0 success, 1 runtime failure, 2 bad command line or configuration.

Configuration keys (defaults: etc/tandem.toml, embedded in the binary):
)";
}

}  // namespace tandem
