#include <doctest/doctest.h>

#include "engine/request_state.h"

using namespace tandem::engine;

TEST_CASE("request_state: the normal life records every edge with its reason") {
    state_record r;
    CHECK(r.state == request_state::queued);
    transition(r, request_state::prefilling, "admitted");
    transition(r, request_state::decoding, "first token");
    transition(r, request_state::queued, "preempted: cache full");
    transition(r, request_state::prefilling, "re-admitted");
    transition(r, request_state::decoding, "recomputed");
    transition(r, request_state::finished, "eos");
    REQUIRE(r.history.size() == 6);
    CHECK(r.history[2].from == request_state::decoding);
    CHECK(r.history[2].to == request_state::queued);
    CHECK(r.history[2].reason == "preempted: cache full");
    CHECK(r.last_reason() == "eos");
    CHECK(is_terminal(r.state));
}

TEST_CASE("request_state: the edge table") {
    using rs = request_state;
    CHECK(can_transition(rs::queued, rs::prefilling));
    CHECK(can_transition(rs::queued, rs::failed));
    CHECK(can_transition(rs::queued, rs::aborted));
    CHECK_FALSE(can_transition(rs::queued, rs::decoding));
    CHECK(can_transition(rs::prefilling, rs::queued));
    CHECK_FALSE(can_transition(rs::decoding, rs::prefilling));
    for (rs t : {rs::finished, rs::aborted, rs::failed}) {
        for (rs to : {rs::queued, rs::prefilling, rs::decoding, rs::finished, rs::aborted,
                      rs::failed}) {
            CHECK_FALSE(can_transition(t, to));
        }
    }
}
