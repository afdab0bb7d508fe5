// The CPU executor's step output: the rows each plan item asked for (none, the last, all), in plan
// order, bitwise the model's own logits for them — written there by the model's head directly.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "engine/cpu_executor.h"
#include "tiny_checkpoint.h"

using namespace tandem;
using namespace tandem::engine;

namespace {

std::shared_ptr<pool_sequences> tiny_sequences(const model::model& m) {
    auto layout = cache::layout_spec::create(m.config(), cache::layout_options{cache::kv_dtype::bf16,
                                                                                cache::index_k_dtype::bf16, 128});
    REQUIRE_MESSAGE(layout.is_ok(), layout.error().message());
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{32} << 20, 8});
    REQUIRE_MESSAGE(pool.is_ok(), pool.error().message());
    return std::make_shared<pool_sequences>(std::move(pool.value()));
}

std::vector<int32_t> random_tokens(uint64_t seed, int64_t n, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(2 + rng() % static_cast<uint64_t>(vocab - 2));
    return t;
}

}  // namespace

TEST_CASE("cpu executor: each item's logit rows land in plan order, bitwise the model's, none computed for none") {
    test::tiny_checkpoint ck(9);
    auto m = model::model::load(ck.dir.string(), model::model_options{model::numerics_mode::hf, 2});
    REQUIRE_MESSAGE(m.is_ok(), m.error().message());
    auto ref_model = model::model::load(ck.dir.string(), model::model_options{model::numerics_mode::hf, 2});
    REQUIRE(ref_model.is_ok());
    const int64_t vocab = (*m)->config().vocab_size;
    auto seqs = tiny_sequences(**m);
    auto ref_seqs = tiny_sequences(**ref_model);
    cpu_executor ex(std::move(m.value()), seqs);

    const std::vector<int32_t> a = random_tokens(1, 90, vocab), b = random_tokens(2, 23, vocab),
                               c = random_tokens(3, 31, vocab);
    // Reference: each prompt alone through model::forward with every row's logits.
    std::vector<std::vector<float>> full;
    for (const auto* p : {&a, &b, &c}) {
        auto id = ref_seqs->create();
        REQUIRE(id.is_ok());
        const cache::slot_ref slot = ref_seqs->slot(*id);
        REQUIRE(ref_seqs->pool().ensure_capacity(slot, static_cast<int64_t>(p->size())));
        const model::forward_item it{*p, 0, slot, model::logit_rows::all};
        auto out = (*ref_model)->forward(ref_seqs->pool(), std::span<const model::forward_item>(&it, 1));
        REQUIRE_MESSAGE(out.is_ok(), out.error().message());
        full.push_back(out->logits[0]);
    }
    const auto ref_row = [&](int which, int64_t pos) { return &full[static_cast<size_t>(which)][pos * vocab]; };

    sequence_id ids[3];
    for (auto& id : ids) {
        auto r = ex.new_sequence();
        REQUIRE(r.is_ok());
        id = *r;
    }
    const auto item = [&](int which, const std::vector<int32_t>& t, int64_t from, int64_t n, logits_mode mode) {
        plan_item it;
        it.sequence = ids[which];
        it.start_position = from;
        it.tokens.assign(t.begin() + from, t.begin() + from + n);
        it.logits = mode;
        REQUIRE(seqs->pool().ensure_capacity(seqs->slot(ids[which]), from + n));
        return it;
    };
    step_output out;

    // A step that asks no row: nothing comes back.
    step_plan first;
    first.items = {item(0, a, 0, 50, logits_mode::none), item(1, b, 0, 10, logits_mode::none)};
    REQUIRE(ex.execute(first, out).is_ok());
    CHECK(out.logits.empty());
    CHECK(out.row_count == std::vector<int64_t>{0, 0});
    CHECK(out.first_row == std::vector<int64_t>{-1, -1});

    // none, all and last side by side: rows [c's 31 | a's last], b's none in between.
    step_plan second;
    second.items = {item(2, c, 0, 31, logits_mode::all), item(1, b, 10, 13, logits_mode::none),
                    item(0, a, 50, 40, logits_mode::last)};
    REQUIRE(ex.execute(second, out).is_ok());
    REQUIRE(out.row_count == std::vector<int64_t>{31, 0, 1});
    REQUIRE(out.first_row == std::vector<int64_t>{0, -1, 31});
    REQUIRE(static_cast<int64_t>(out.logits.size()) == 32 * vocab);
    for (int64_t r = 0; r < 31; ++r) {
        CAPTURE(r);
        CHECK(std::memcmp(&out.logits[r * vocab], ref_row(2, r), vocab * sizeof(float)) == 0);
    }
    CHECK(std::memcmp(&out.logits[31 * vocab], ref_row(0, 89), vocab * sizeof(float)) == 0);

    // b's chunks before asked no row; its next token's logits are still the full prompt's.
    step_plan third;
    const std::vector<int32_t> b_next = random_tokens(4, 1, vocab);
    plan_item decode;
    decode.sequence = ids[1];
    decode.start_position = 23;
    decode.tokens = b_next;
    decode.logits = logits_mode::last;
    REQUIRE(seqs->pool().ensure_capacity(seqs->slot(ids[1]), 24));
    third.items = {decode};
    REQUIRE(ex.execute(third, out).is_ok());
    REQUIRE(static_cast<int64_t>(out.logits.size()) == vocab);
    // Reference: b plus that token in one prefill.
    std::vector<int32_t> b_plus = b;
    b_plus.push_back(b_next[0]);
    auto id = ref_seqs->create();
    REQUIRE(id.is_ok());
    REQUIRE(ref_seqs->pool().ensure_capacity(ref_seqs->slot(*id), 24));
    const model::forward_item it{b_plus, 0, ref_seqs->slot(*id), model::logit_rows::last};
    auto ref = (*ref_model)->forward(ref_seqs->pool(), std::span<const model::forward_item>(&it, 1));
    REQUIRE(ref.is_ok());
    REQUIRE(static_cast<int64_t>(ref->logits[0].size()) == vocab);
    CHECK(std::memcmp(out.logits.data(), ref->logits[0].data(), vocab * sizeof(float)) == 0);
}
