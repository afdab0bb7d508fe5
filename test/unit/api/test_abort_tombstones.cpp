// Aborts that arrive before their request (abort_tombstones.h): the pending set's expiry and
// bound, and app_state's "tracked or tombstoned" decision.
#include <doctest/doctest.h>

#include <string>

#include "api/abort_tombstones.h"
#include "api/app_state.h"

namespace tandem::api {
namespace {

using namespace std::chrono_literals;
using clock_type = abort_tombstones::clock;

TEST_CASE("abort tombstones: an id is pending for its lifetime, then gone") {
    abort_tombstones t(8, 5s);
    const clock_type::time_point t0{};
    t.record("req-1", t0);
    CHECK(t.contains("req-1", t0));
    CHECK(t.contains("req-1", t0 + 4999ms));
    CHECK_FALSE(t.contains("req-2", t0));
    CHECK_FALSE(t.contains("req-1", t0 + 5s));
    CHECK(t.size(t0 + 5s) == 0);
}

TEST_CASE("abort tombstones: aborting a pending id again restarts its lifetime") {
    abort_tombstones t(8, 5s);
    const clock_type::time_point t0{};
    t.record("a", t0);
    t.record("b", t0 + 1s);
    t.record("a", t0 + 3s);
    CHECK(t.size(t0 + 3s) == 2);
    CHECK(t.contains("a", t0 + 7s));       // 4 s after its second abort
    CHECK_FALSE(t.contains("b", t0 + 7s));  // 6 s after its only one
}

TEST_CASE("abort tombstones: the set is bounded; the oldest pending abort goes first") {
    abort_tombstones t(3, 60s);
    const clock_type::time_point t0{};
    for (int i = 0; i < 5; ++i) t.record("id-" + std::to_string(i), t0 + std::chrono::seconds(i));
    CHECK(t.size(t0 + 5s) == 3);
    CHECK_FALSE(t.contains("id-0", t0 + 5s));
    CHECK_FALSE(t.contains("id-1", t0 + 5s));
    for (int i = 2; i < 5; ++i) CHECK(t.contains("id-" + std::to_string(i), t0 + 5s));
}

TEST_CASE("app_state: an abort before the request is pending, and the request meets it") {
    app_state app{config{}};
    const app_state::abort_plan early = app.plan_abort("late-request");
    CHECK(early.pending);
    CHECK(early.running.empty());
    // Every engine request of that HTTP request (n > 1) is told to abort, not only the first.
    CHECK(app.track("late-request", 7));
    CHECK(app.track("late-request", 8));
    CHECK_FALSE(app.track("other-request", 9));
}

TEST_CASE("app_state: an abort for a tracked request aborts it and leaves no tombstone") {
    app_state app{config{}};
    CHECK_FALSE(app.track("running", 3));
    const app_state::abort_plan plan = app.plan_abort("running");
    CHECK_FALSE(plan.pending);
    CHECK(plan.running == std::vector<engine::request_id>{3});
    app.untrack("running", 3);
    CHECK_FALSE(app.track("running", 4));  // the same id reused later is not aborted
}

}  // namespace
}  // namespace tandem::api
