// The small in-process deployment the topo tests run on the tiny model: a 64 MiB pool of
// 128-token pages, 8 sequences, 2 threads, and an ephemeral tcp port.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "core/config.h"
#include "core/config_test_helpers.h"

namespace tandem::test {

inline config deployment_test_config(const std::string& model_dir) {
    auto cfg = load_config({});
    REQUIRE(cfg);
    config c = *cfg;
    c.model.path = model_dir;
    c.backend.threads = 2;
    c.cache.memory_bytes = int64_t{64} << 20;
    c.cache.page_size = 128;
    c.scheduler.max_running_requests = 8;
    c.scheduler.max_prefill_tokens = 512;
    c.transport.listen_port = 0;
    testing::no_verify(c);
    return c;
}

}  // namespace tandem::test
