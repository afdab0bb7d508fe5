// bench_scheduler_overhead — What the lockstep scheduler costs beyond the forward pass.
//
// Runs the real engine stack (CPU model, page pool, scheduler) on a generated checkpoint with
// B concurrent requests (B = 1, 64, 256 by default), each decoding a fixed number of tokens.
// The executor is wrapped so the forward pass is timed on its own; the scheduler's step-time
// histogram gives the whole step. Overhead = (step time − forward time) / step time: planning,
// capacity, sampling over the full vocabulary, committing and emitting events. Both are measured
// in the same run, so the fraction does not depend on how fast this machine is.
//
//   build/bench/engine/bench_scheduler_overhead [--model models/tiny] [--batches 1,64,256] [--tokens 8]
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "cache/plan_command.h"
#include "engine/cpu_executor.h"
#include "engine/pool_capacity.h"
#include "engine/scheduler.h"
#include "model/model.h"

using namespace tandem;

namespace {

// Times every execute() of the wrapped executor.
class timed_executor final : public engine::model_executor {
public:
    explicit timed_executor(std::unique_ptr<engine::model_executor> inner) : inner_(std::move(inner)) {}
    result<engine::sequence_id> new_sequence() override { return inner_->new_sequence(); }
    void free_sequence(engine::sequence_id id) override { inner_->free_sequence(id); }
    status execute(const engine::step_plan& plan, engine::step_output& out) override {
        auto t0 = std::chrono::steady_clock::now();
        status st = inner_->execute(plan, out);
        forward_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t0).count();
        return st;
    }
    int32_t vocab_size() const override { return inner_->vocab_size(); }
    int32_t eos_token_id() const override { return inner_->eos_token_id(); }
    int64_t max_context_tokens() const override { return inner_->max_context_tokens(); }
    std::atomic<int64_t> forward_ns{0};

private:
    std::unique_ptr<engine::model_executor> inner_;
};

struct run_result {
    double step_s = 0, forward_s = 0;
    int64_t steps = 0, tokens = 0;
};

result<run_result> run_batch(const std::string& model_dir, int64_t batch, int64_t tokens) {
    auto m = model::model::load(model_dir, {});
    if (!m) return m.error();
    cache::layout_options lo;
    lo.kv = cache::kv_dtype::bf16;
    lo.index_k = cache::index_k_dtype::bf16;
    auto layout = cache::layout_spec::create((*m)->config(), lo);
    if (!layout) return layout.error();
    auto plan = cache::make_cache_plan((*m)->config(), model_dir, *layout, int64_t{2} << 30, batch);
    if (!plan) return plan.error();
    auto pool = cache::page_pool::create(plan->layout, {plan->memory_bytes, plan->split.num_slots});
    if (!pool) return pool.error();
    auto seqs = std::make_shared<engine::pool_sequences>(std::move(*pool));
    auto exec = std::make_unique<timed_executor>(
        std::make_unique<engine::cpu_executor>(std::move(*m), seqs));
    timed_executor* timer = exec.get();
    engine::scheduler_options so;
    so.max_running_requests = batch;
    so.max_queued_requests = batch;
    engine::scheduler sched(std::move(exec), std::make_unique<engine::pool_capacity>(seqs), so);

    std::mutex mu;
    std::condition_variable cv;
    int64_t done = 0;
    for (int64_t i = 0; i < batch; ++i) {
        engine::submit_request req;
        req.prompt = {0, static_cast<int32_t>(100 + i), static_cast<int32_t>(7 + i % 50)};
        req.params.temperature = 0;
        req.params.max_tokens = tokens;
        req.params.ignore_eos = true;
        req.sink = [&](engine::token_event&& ev) {
            if (!ev.finished) return;
            std::lock_guard lock(mu);
            ++done;
            cv.notify_all();
        };
        auto id = sched.submit(std::move(req));
        if (!id) return id.error();
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == batch; });
    engine::engine_metrics em = sched.metrics();
    return run_result{em.step_time.sum, timer->forward_ns.load() / 1e9, em.step_time.count,
                      em.stats.generated_tokens};
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    size_t start = 0;
    while (start < s.size()) {
        size_t comma = s.find(',', start);
        out.push_back(std::stoll(s.substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model_dir = "models/tiny";
    std::vector<int64_t> batches = {1, 64, 256};
    int64_t tokens = 8;
    const char* usage = "usage: bench_scheduler_overhead [--model models/tiny] [--batches 1,64,256] [--tokens 8]\n";
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
            std::fputs(usage, stdout);
            return 0;
        }
    if (argc % 2 == 0) {
        std::fprintf(stderr, "%s needs a value\n%s", argv[argc - 1], usage);
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        if (flag == "--model") model_dir = argv[i + 1];
        else if (flag == "--batches") batches = parse_list(argv[i + 1]);
        else if (flag == "--tokens") tokens = std::stoll(argv[i + 1]);
        else { std::fprintf(stderr, "unknown flag %s\n", flag.c_str()); return 2; }
    }
    fmt::print("model {}: {} tokens per request, greedy; overhead = (step - forward) / step\n",
               model_dir, tokens);
    fmt::print("{:>6} {:>7} {:>12} {:>14} {:>14} {:>10}\n", "batch", "steps", "step ms", "forward ms",
               "overhead ms", "overhead");
    for (int64_t b : batches) {
        auto r = run_batch(model_dir, b, tokens);
        if (!r) {
            std::fprintf(stderr, "batch %lld: %s\n", static_cast<long long>(b), r.error().message().c_str());
            return 1;
        }
        double per_step = 1000 * r->step_s / r->steps, fwd = 1000 * r->forward_s / r->steps;
        fmt::print("{:>6} {:>7} {:>12.3f} {:>14.3f} {:>14.3f} {:>9.1f}%\n", b, r->steps, per_step, fwd,
                   per_step - fwd, 100 * (r->step_s - r->forward_s) / r->step_s);
    }
    return 0;
}
