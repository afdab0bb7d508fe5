// tandem — command line → config → the chosen command. Exit codes: 0 ok, 1 runtime failure,
// 2 bad command line or configuration.
#include <cstdio>
#include <string>
#include <vector>

#include "api/serve.h"
#include "cache/plan_command.h"
#include "core/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "model/make_model_command.h"
#include "topo/deployment.h"
#include "tandem_build_config.h"

namespace {

constexpr int k_exit_usage = 2;

int fail_usage(const std::string& message) {
    std::fprintf(stderr, "tandem: %s\n", message.c_str());
    return k_exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tandem;
    std::vector<std::string> args(argv + 1, argv + argc);
    result<cli_options> opt = parse_cli(args);
    if (!opt) return fail_usage(opt.error().message());
    if (opt->help) {
        std::fputs((cli_usage() + config_reference()).c_str(), stdout);
        return 0;
    }
    if (opt->version) {
        std::printf("tandem %s (allocator %s, cuda %s)\n", TANDEM_VERSION, TANDEM_ALLOCATOR,
                    TANDEM_WITH_CUDA ? "built" : "not built");
        return 0;
    }
    result<config> cfg = load_config(opt->sources);
    if (!cfg) return fail_usage(cfg.error().message());
    if (opt->print_config) {
        // What serving would refuse is refused here too (the same checks, the same exit code).
        if (status st = topo::validate_topology(*cfg); !st) return fail_usage(st.message());
        std::fputs(config_to_toml(*cfg).c_str(), stdout);
        return 0;
    }
    log::level lvl = log::level::info;
    log::parse_level(cfg->logging.level, &lvl);
    log::set_level(lvl);

    if (opt->command == "serve") return api::run_server(*cfg);
    if (opt->command == "plan") return cache::run_plan_command(*cfg, opt->json);
    if (opt->command == "make-model") {
        return model::run_make_model_command(opt->preset, opt->out_dir, opt->seed,
                                             opt->tokenizer_dir);
    }
    return fail_usage("unknown command '" + opt->command + "'");
}
