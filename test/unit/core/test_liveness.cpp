#include <doctest/doctest.h>

#include "core/liveness.h"

using namespace tandem;

TEST_CASE("liveness: idle loops are healthy however long they sleep") {
    heartbeat hb("scheduler");
    CHECK_FALSE(hb.problem(monotonic_ms() + 1'000'000, 100));
}

TEST_CASE("liveness: pending work without progress is a stall naming the loop") {
    heartbeat hb("scheduler");
    hb.set_pending(true);
    int64_t now = monotonic_ms();
    CHECK_FALSE(hb.problem(now + 50, 100));
    auto p = hb.problem(now + 500, 100);
    REQUIRE(p);
    CHECK(p->find("scheduler") != std::string::npos);
    hb.beat();
    CHECK_FALSE(hb.problem(monotonic_ms() + 50, 100));
}

TEST_CASE("liveness: a dead loop is reported with its reason") {
    liveness_registry reg;
    auto a = reg.add("http");
    auto b = reg.add("transport");
    CHECK_FALSE(reg.problem(100));
    b->mark_dead("peer socket closed");
    auto p = reg.problem(100);
    REQUIRE(p);
    CHECK(p->find("transport") != std::string::npos);
    CHECK(p->find("peer socket closed") != std::string::npos);
}
