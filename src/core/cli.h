// core/cli.h — The command line: a subcommand plus flags, turned into config_sources.
//
//   tandem [serve] [--config FILE] [--topology single|pd] [--model DIR] [--host H] [--port P]
//          [--set section.key=value]... [--print-config]
//   tandem plan [same config flags] [--json]
//   tandem make-model --preset NAME --out DIR [--seed S] [--tokenizer DIR]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace tandem {

struct cli_options {
    std::string command = "serve";  // serve | plan | make-model
    config_sources sources;
    bool print_config = false;
    bool help = false;
    bool version = false;
    bool json = false;              // plan --json
    std::string preset;             // make-model
    std::string out_dir;            // make-model
    uint64_t seed = 0;              // make-model
    std::string tokenizer_dir;      // make-model
};

result<cli_options> parse_cli(const std::vector<std::string>& args);
std::string cli_usage();

}  // namespace tandem
