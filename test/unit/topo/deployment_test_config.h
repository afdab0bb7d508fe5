// The small in-process deployment the topo tests run on the tiny model: a 64 MiB pool of
// 128-token pages, 8 sequences, 2 threads, and an ephemeral tcp port; and a deployment of it
// started and healthy.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "core/config.h"
#include "core/config_test_helpers.h"
#include "core/liveness.h"
#include "topo/deployment.h"

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

// A deployment created from `c` whose /health is fine (within 10 s), or a failed REQUIRE.
struct healthy_deployment {
    liveness_registry liveness;
    std::unique_ptr<topo::deployment> dep;
    explicit healthy_deployment(const config& c) {
        auto d = topo::deployment::create(c, liveness);
        REQUIRE_MESSAGE(d, d.error().message());
        dep = std::move(*d);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (dep->health_problem() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        REQUIRE_FALSE(dep->health_problem());
    }
    tandem::engine::engine& eng() { return *dep->api_engine(); }
};

}  // namespace tandem::test
