#include "engine/fake_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/check.h"
#include "engine/rng.h"

namespace tandem::engine {

fake_executor::fake_executor(fake_executor_options opt) : opt_(opt) {}

result<sequence_id> fake_executor::new_sequence() {
    if (static_cast<int64_t>(seqs_.size()) >= opt_.max_sequences) {
        return make_error(error_code::unavailable, "fake executor: no free sequence");
    }
    sequence_id id = next_id_++;
    seqs_.emplace(id, sequence_state{});
    live_.store(static_cast<int64_t>(seqs_.size()));
    return id;
}

void fake_executor::free_sequence(sequence_id id) {
    TANDEM_CHECK_MSG(seqs_.erase(id) == 1, "free of an unknown sequence");
    live_.store(static_cast<int64_t>(seqs_.size()));
}

void fake_executor::land_prefix(sequence_id id, std::span<const int32_t> tokens) {
    auto it = seqs_.find(id);
    TANDEM_CHECK_MSG(it != seqs_.end() && it->second.length == 0, "landing into a used sequence");
    for (int32_t t : tokens) it->second.hash = extend_hash(it->second.hash, t);
    it->second.length = static_cast<int64_t>(tokens.size());
}

uint64_t fake_executor::extend_hash(uint64_t prefix_hash, int32_t token) {
    return mix64(prefix_hash ^ mix64(static_cast<uint64_t>(token) + 0x1234567ULL));
}

void fake_executor::logits_for_prefix_hash(uint64_t prefix_hash, std::span<float> row) {
    // Uniform in [-4, 4): spread enough that sampling is not near-uniform, and ties are rare.
    for (size_t v = 0; v < row.size(); ++v) {
        uint64_t h = mix64(prefix_hash + v * 0x9e3779b97f4a7c15ULL);
        row[v] = static_cast<float>(static_cast<double>(h >> 40) / 16777216.0 * 8.0 - 4.0);
    }
}

status fake_executor::execute(const step_plan& plan, step_output& out) {
    if (opt_.step_delay_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(opt_.step_delay_us));
    if (steps_.fetch_add(1) + 1 == opt_.fail_step) {
        return make_error(error_code::internal, "fake executor: injected failure");
    }
    prepare_output(plan, opt_.vocab, out);
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const plan_item& it = plan.items[i];
        auto found = seqs_.find(it.sequence);
        TANDEM_CHECK_MSG(found != seqs_.end(), "plan names an unknown sequence");
        sequence_state& s = found->second;
        TANDEM_CHECK_MSG(it.start_position == s.length, "chunk does not continue its sequence");
        TANDEM_CHECK(!it.tokens.empty());
        TANDEM_CHECK_MSG(s.length + static_cast<int64_t>(it.tokens.size()) <= opt_.max_context,
                         "sequence past the fake model's context");
        for (size_t j = 0; j < it.tokens.size(); ++j) {
            s.hash = extend_hash(s.hash, it.tokens[j]);
            ++s.length;
            bool row = it.logits == logits_mode::all ||
                       (it.logits == logits_mode::last && j + 1 == it.tokens.size());
            if (!row) continue;
            int64_t r = out.first_row[i] + (it.logits == logits_mode::all ? int64_t(j) : 0);
            logits_for_prefix_hash(s.hash,
                                   std::span<float>(out.logits)
                                       .subspan(static_cast<size_t>(r * opt_.vocab), opt_.vocab));
        }
        max_chunk_.store(std::max<int64_t>(max_chunk_.load(), int64_t(it.tokens.size())));
    }
    max_batch_.store(std::max<int64_t>(max_batch_.load(), int64_t(plan.items.size())));
    max_logit_rows_.store(std::max<int64_t>(max_logit_rows_.load(), int64_t(out.logits.size()) / opt_.vocab));
    return status::ok();
}

}  // namespace tandem::engine
