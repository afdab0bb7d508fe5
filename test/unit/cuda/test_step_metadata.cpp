// Per-step metadata of the device forward (cuda/host/step_metadata.h).
#include <doctest/doctest.h>

#include "cuda/host/step_metadata.h"

using namespace tandem;
using namespace tandem::cuda;
using engine::logits_mode;

namespace {

engine::plan_item item(int64_t start, std::vector<int32_t> tokens, logits_mode lm) {
    engine::plan_item it;
    it.start_position = start;
    it.tokens = std::move(tokens);
    it.logits = lm;
    return it;
}

const step_limits k_limits{1000, 4, 0};

}  // namespace

TEST_CASE("step metadata: rows, positions, windows and head rows of a mixed step") {
    engine::step_plan p;
    p.items = {item(10, {7}, logits_mode::last), item(0, {1, 2, 3}, logits_mode::none),
               item(5, {4, 5, 6, 7}, logits_mode::all)};
    auto m = plan_step_metadata(p, k_limits);
    REQUIRE(m.is_ok());
    CHECK(m->rows == 8);
    CHECK(m->token == std::vector<int32_t>{7, 1, 2, 3, 4, 5, 6, 7});
    CHECK(m->position == std::vector<int64_t>{10, 0, 1, 2, 5, 6, 7, 8});
    CHECK(m->row_item == std::vector<int32_t>{0, 1, 1, 1, 2, 2, 2, 2});
    CHECK(m->window_first == std::vector<int64_t>{7, 0, 0, 0, 2, 3, 4, 5});
    CHECK(m->item_row0 == std::vector<int64_t>{0, 1, 4});
    CHECK(m->head_rows == std::vector<int64_t>{0, 4, 5, 6, 7});
    CHECK(m->out_first_row == std::vector<int64_t>{0, -1, 1});
    // The decode row (position 10) sees ring rows 7..9 and itself; position 5 (its item's start)
    // sees ring rows 2..4 and itself; position 8's window [5, 8] lies inside the step.
    CHECK(m->ring_keys(0) == 3);
    CHECK(m->step_keys(0) == 1);
    CHECK(m->ring_keys(4) == 3);
    CHECK(m->step_keys(4) == 1);
    CHECK(m->ring_keys(7) == 0);
    CHECK(m->step_keys(7) == 4);
    for (int64_t r = 0; r < m->rows; ++r)  // a window never holds more than W keys, nor fewer than it can
        CHECK(m->ring_keys(r) + m->step_keys(r) == std::min<int64_t>(4, m->position[r] + 1));
}

TEST_CASE("step metadata: a row's entries do not depend on the rest of the batch") {
    engine::step_plan alone, crowded;
    alone.items = {item(37, {9, 8, 7}, logits_mode::all)};
    crowded.items = {item(0, {1, 1, 1, 1, 1}, logits_mode::last), item(2, {3}, logits_mode::last),
                     item(37, {9, 8, 7}, logits_mode::all), item(100, {5, 5}, logits_mode::none)};
    auto a = plan_step_metadata(alone, k_limits);
    auto c = plan_step_metadata(crowded, k_limits);
    REQUIRE(a.is_ok());
    REQUIRE(c.is_ok());
    const int64_t off = c->item_row0[2];
    CHECK(off == 6);
    for (int64_t r = 0; r < 3; ++r) {
        CHECK(c->token[off + r] == a->token[r]);
        CHECK(c->position[off + r] == a->position[r]);
        CHECK(c->window_first[off + r] == a->window_first[r]);
        CHECK(c->ring_keys(off + r) == a->ring_keys(r));
        CHECK(c->step_keys(off + r) == a->step_keys(r));
    }
    CHECK(c->head_rows[static_cast<size_t>(c->out_first_row[2])] == off);
}

TEST_CASE("step metadata: compressed rows visible per ratio") {
    CHECK(compressed_rows_visible(2, 4) == 0);
    CHECK(compressed_rows_visible(3, 4) == 1);
    CHECK(compressed_rows_visible(126, 128) == 0);
    CHECK(compressed_rows_visible(127, 128) == 1);
    CHECK(compressed_rows_visible((int64_t{1} << 40) - 1, 4) == int64_t{1} << 38);  // int64 positions
    CHECK(compressed_rows_visible(100, 0) == 0);
}

TEST_CASE("step metadata: bad plans are errors naming the item") {
    engine::step_plan p;
    p.step = 3;
    p.items = {item(0, {}, logits_mode::last)};
    auto e = plan_step_metadata(p, k_limits);
    REQUIRE_FALSE(e.is_ok());
    CHECK(e.error().message().find("step 3 item 0: no tokens") != std::string::npos);
    p.items = {item(0, {1}, logits_mode::last), item(-1, {1}, logits_mode::last)};
    CHECK(plan_step_metadata(p, k_limits).error().message().find("item 1: negative start") != std::string::npos);
    p.items = {item(0, {1000}, logits_mode::last)};
    auto v = plan_step_metadata(p, k_limits);
    REQUIRE_FALSE(v.is_ok());
    CHECK(v.error().code() == error_code::out_of_range);
    CHECK(v.error().message().find("token id 1000 outside [0, 1000)") != std::string::npos);
    p.items = {item(0, {1, 2, 3}, logits_mode::last)};
    CHECK_FALSE(plan_step_metadata(p, step_limits{1000, 4, 2}).is_ok());
    CHECK(plan_step_metadata(p, step_limits{1000, 4, 3}).is_ok());
    CHECK_FALSE(plan_step_metadata(p, step_limits{1000, 0, 0}).is_ok());
}
