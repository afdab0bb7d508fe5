// The device forward (cuda/host/device_forward.*) through its executor, on the kernels' host
// emulation, against the CPU executor on the same generated `tiny` checkpoint: the same step plans
// (two sequences, chunked prefill that crosses the window, CSA top-k with more compressed rows than
// top-k, HCA, hash and score MoE layers, then greedy decode) must give bit-identical logits. This
// proves the device path's plumbing — step metadata, pool row addresses, compressor ring
// indexing, key lists, top-k, MoE grouping — without a GPU; on a GPU cuda_e2e runs the same
// executor over the CUDA kernels (tier 5).
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "../model/model_test_util.h"
#include "cuda/host/device_executor.h"
#include "engine/cpu_executor.h"

using namespace tandem;
using namespace tandem::model::testing;

namespace {

std::shared_ptr<engine::pool_sequences> make_sequences(const model::model_config& c, cache::kv_dtype kv,
                                                       cache::index_k_dtype ik) {
    auto layout = cache::layout_spec::create(c, cache::layout_options{kv, ik, 128});
    REQUIRE_MESSAGE(layout.is_ok(), layout.error().message());
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{64} << 20, 4});
    REQUIRE_MESSAGE(pool.is_ok(), pool.error().message());
    return std::make_shared<engine::pool_sequences>(std::move(pool.value()));
}

struct executor_pair {
    std::unique_ptr<engine::model_executor> cpu, dev;
    executor_pair(const std::string& dir, cache::kv_dtype kv, cache::index_k_dtype ik, model::numerics_mode num,
                  cuda::emulation_options emu = {}, std::shared_ptr<const cuda::resident_weights> share = nullptr) {
        auto m = model::model::load(dir, model::model_options{num, 1});
        REQUIRE_MESSAGE(m.is_ok(), m.error().message());
        auto cpu_seqs = make_sequences((*m)->config(), kv, ik);
        auto dev_seqs = make_sequences((*m)->config(), kv, ik);
        cpu = std::make_unique<engine::cpu_executor>(std::move(m.value()), cpu_seqs);
        auto d = cuda::device_executor::create(cuda::make_emulated_runtime(emu), {}, dir, num, dev_seqs, std::move(share));
        REQUIRE_MESSAGE(d.is_ok(), d.error().message());
        dev_exec = d->get();
        dev = std::move(d.value());
        seqs_ = {cpu_seqs, dev_seqs};
    }
    cuda::device_executor* dev_exec = nullptr;  // dev, for its K12 counts
    std::vector<std::shared_ptr<engine::pool_sequences>> seqs_;
    // Both executors' pools grow their page tables the way pool_capacity would.
    void ensure(const engine::step_plan& plan) {
        for (const auto& it : plan.items)
            for (auto& s : seqs_)
                REQUIRE(s->pool().ensure_capacity(s->slot(it.sequence),
                                                  it.start_position + static_cast<int64_t>(it.tokens.size())));
    }
};

std::vector<int32_t> random_tokens(uint64_t seed, int64_t n, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(2 + rng() % static_cast<uint64_t>(vocab - 2));
    return t;
}

int32_t argmax_row(const std::vector<float>& logits, int64_t row, int32_t vocab) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
        if (logits[row * vocab + v] > logits[row * vocab + best]) best = v;
    return static_cast<int32_t>(best);
}

// Runs prefill chunks then greedy decode on both executors, comparing every step's logits.
void compare_runs(executor_pair& ex) {
    const int32_t vocab = ex.cpu->vocab_size();
    REQUIRE(ex.dev->vocab_size() == vocab);
    auto a = ex.cpu->new_sequence(), b = ex.cpu->new_sequence();
    auto da = ex.dev->new_sequence(), db = ex.dev->new_sequence();
    REQUIRE((a.is_ok() && b.is_ok() && da.is_ok() && db.is_ok()));
    REQUIRE((*a == *da && *b == *db));  // same id sequence, so one plan serves both
    const std::vector<int32_t> pa = random_tokens(5, 70, vocab), pb = random_tokens(6, 23, vocab);
    auto item = [](engine::sequence_id s, const std::vector<int32_t>& t, size_t from, size_t to, engine::logits_mode lm) {
        engine::plan_item it;
        it.sequence = s;
        it.start_position = static_cast<int64_t>(from);
        it.tokens.assign(t.begin() + static_cast<int64_t>(from), t.begin() + static_cast<int64_t>(to));
        it.logits = lm;
        return it;
    };
    std::vector<engine::step_plan> plans(3);
    plans[0].items = {item(*a, pa, 0, 13, engine::logits_mode::none), item(*b, pb, 0, 23, engine::logits_mode::all)};
    plans[1].items = {item(*a, pa, 13, 41, engine::logits_mode::none)};
    plans[2].items = {item(*a, pa, 41, 70, engine::logits_mode::last)};
    std::vector<int32_t> next_a, next_b = {0};
    int64_t pos_a = 70, pos_b = 23;
    engine::step_output co, dout;
    for (size_t s = 0; s < plans.size(); ++s) {
        CAPTURE(s);
        ex.ensure(plans[s]);
        REQUIRE(ex.cpu->execute(plans[s], co).is_ok());
        status st = ex.dev->execute(plans[s], dout);
        REQUIRE_MESSAGE(st.is_ok(), st.message());
        REQUIRE(co.logits.size() == dout.logits.size());
        CHECK(std::memcmp(co.logits.data(), dout.logits.data(), co.logits.size() * 4) == 0);
        if (s == 0) next_b = {argmax_row(co.logits, 22, vocab)};
        if (s == 2) next_a = {argmax_row(co.logits, 0, vocab)};
    }
    // Greedy decode, both sequences batched in one step each time.
    for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        engine::step_plan p;
        p.items = {item(*b, next_b, 0, 1, engine::logits_mode::last), item(*a, next_a, 0, 1, engine::logits_mode::last)};
        p.items[0].start_position = pos_b;
        p.items[1].start_position = pos_a;
        ex.ensure(p);
        REQUIRE(ex.cpu->execute(p, co).is_ok());
        status st = ex.dev->execute(p, dout);
        REQUIRE_MESSAGE(st.is_ok(), st.message());
        REQUIRE(co.logits.size() == dout.logits.size());
        CHECK(std::memcmp(co.logits.data(), dout.logits.data(), co.logits.size() * 4) == 0);
        CHECK(argmax_row(dout.logits, 0, vocab) == argmax_row(co.logits, 0, vocab));
        next_b = {argmax_row(co.logits, 0, vocab)};
        next_a = {argmax_row(co.logits, 1, vocab)};
        ++pos_a, ++pos_b;
    }
    ex.cpu->free_sequence(*a);
    ex.cpu->free_sequence(*b);
    ex.dev->free_sequence(*da);
    ex.dev->free_sequence(*db);
}

}  // namespace

TEST_CASE("device forward (host emulation) equals the CPU executor bit for bit on tiny, hf numerics") {
    temp_dir dir("device_forward_hf");
    make_checkpoint("tiny", 3, dir.str());
    executor_pair ex(dir.str(), cache::kv_dtype::fp32, cache::index_k_dtype::fp32, model::numerics_mode::hf);
    compare_runs(ex);
    CHECK(ex.dev_exec->top_k_stats().rows > 0);  // CSA rows past top-k went through K12
}

TEST_CASE("device forward (host emulation) equals the CPU executor with fp8 / fp4 cache rows, official numerics") {
    temp_dir dir("device_forward_official");
    make_checkpoint("tiny-fp8", 4, dir.str());
    executor_pair ex(dir.str(), cache::kv_dtype::fp8, cache::index_k_dtype::fp4, model::numerics_mode::official);
    compare_runs(ex);
    CHECK(ex.dev_exec->top_k_stats().rows > 0);  // CSA rows past top-k went through K12
}

TEST_CASE("device forward (host emulation): K12's host fallback on every row keeps the logits bit-identical") {
    // Every scored row flagged as tied: each downloads its scores and takes the CPU's selection,
    // whose ids replace K12's on the device (select_compressed) — the plumbing real ties use.
    temp_dir dir("device_forward_topk_fallback");
    make_checkpoint("tiny-fp8", 4, dir.str());
    executor_pair ex(dir.str(), cache::kv_dtype::fp8, cache::index_k_dtype::fp4, model::numerics_mode::official,
                     cuda::emulation_options{true});
    compare_runs(ex);
    const auto counts = ex.dev_exec->top_k_stats();
    CHECK(counts.rows > 0);
    CHECK(counts.host_rows == counts.rows);
}

TEST_CASE("device executor: errors name the problem and leave it usable") {
    temp_dir dir("device_forward_errors");
    make_checkpoint("tiny", 3, dir.str());
    executor_pair ex(dir.str(), cache::kv_dtype::bf16, cache::index_k_dtype::bf16, model::numerics_mode::hf);
    auto s = ex.dev->new_sequence();
    REQUIRE(s.is_ok());
    engine::step_plan p;
    engine::plan_item it;
    it.sequence = *s;
    it.tokens = {5, ex.dev->vocab_size()};  // second id outside the vocabulary
    it.logits = engine::logits_mode::last;
    p.items = {it};
    engine::step_output out;
    status st = ex.dev->execute(p, out);
    CHECK(st.code() == error_code::out_of_range);
    CHECK(st.message().find("outside") != std::string::npos);
    p.items[0].tokens = {5, 6};
    st = ex.dev->execute(p, out);  // no pages yet
    CHECK(st.code() == error_code::out_of_range);
    CHECK(st.message().find("pages") != std::string::npos);
}

TEST_CASE("device executor: a second executor over the first's resident weights holds no copy, equals the CPU, and outlives it") {
    // pd role both on one device: the decode engine's executor reads the prefill engine's uploaded
    // weights. The weights (and the runtime instance that allocated them) must stay valid after the
    // executor that uploaded them is gone.
    temp_dir dir("device_forward_shared");
    make_checkpoint("tiny", 3, dir.str());
    auto first = std::make_unique<executor_pair>(dir.str(), cache::kv_dtype::fp32, cache::index_k_dtype::fp32,
                                                 model::numerics_mode::hf);
    const std::shared_ptr<const cuda::resident_weights> weights = first->dev_exec->weights();
    REQUIRE(weights);
    CHECK(weights->w.bytes == first->dev_exec->weight_bytes());
    CHECK(weights->w.bytes > 0);
    executor_pair second(dir.str(), cache::kv_dtype::fp32, cache::index_k_dtype::fp32, model::numerics_mode::hf, {},
                         weights);
    CHECK(second.dev_exec->weights().get() == weights.get());  // the same upload, not a copy
    CHECK(second.dev_exec->weight_bytes() == weights->w.bytes);
    compare_runs(*first);
    first.reset();  // the uploading executor (and its runtime instance) gone
    compare_runs(second);

    // Weights of another checkpoint are refused, naming both.
    temp_dir other("device_forward_shared_other");
    make_checkpoint("tiny", 4, other.str());
    auto m = model::model::load(other.str(), model::model_options{model::numerics_mode::hf, 1});
    REQUIRE(m.is_ok());
    auto wrong = cuda::device_executor::create(cuda::make_emulated_runtime(), {}, other.str(), model::numerics_mode::hf,
                                               make_sequences((*m)->config(), cache::kv_dtype::fp32,
                                                              cache::index_k_dtype::fp32),
                                               weights);
    REQUIRE_FALSE(wrong.is_ok());
    CHECK(wrong.error().message().find(dir.str()) != std::string::npos);
    CHECK(wrong.error().message().find(other.str()) != std::string::npos);
}
