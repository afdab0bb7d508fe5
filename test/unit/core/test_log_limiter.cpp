#include <doctest/doctest.h>

#include "core/log_limiter.h"

using namespace tandem;

TEST_CASE("log_limiter: the first event logs; repeats within the interval are held and counted") {
    log_limiter limit(1000);
    int64_t held = -1;
    CHECK(limit.allow(5000, &held));
    CHECK(held == 0);
    CHECK_FALSE(limit.allow(5001, &held));
    CHECK_FALSE(limit.allow(5999, &held));
    CHECK(limit.allow(6000, &held));
    CHECK(held == 2);  // the two held back are reported with the next line
    CHECK_FALSE(limit.allow(6500, &held));
    CHECK(limit.allow(9000, &held));
    CHECK(held == 1);
}
