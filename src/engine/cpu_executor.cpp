#include "engine/cpu_executor.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace tandem::engine {

cpu_executor::cpu_executor(std::unique_ptr<model::model> m, std::shared_ptr<pool_sequences> seqs)
    : model_(std::move(m)), seqs_(std::move(seqs)) {}

int32_t cpu_executor::vocab_size() const {
    return static_cast<int32_t>(model_->config().vocab_size);
}

int32_t cpu_executor::eos_token_id() const {
    const auto& eos = model_->config().eos_token_ids;
    return eos.empty() ? -1 : static_cast<int32_t>(eos.front());
}

int64_t cpu_executor::max_context_tokens() const {
    return model_->config().max_position_embeddings;
}

status cpu_executor::execute(const step_plan& plan, step_output& out) {
    items_.clear();
    std::vector<std::shared_ptr<const cache::load_ticket>> tickets;
    for (const plan_item& it : plan.items) {
        items_.push_back({it.tokens, it.start_position, seqs_->slot(it.sequence),
                          it.logits == logits_mode::all});
        if (const auto* loads = seqs_->loads(it.sequence)) {
            for (const auto& t : *loads)
                if (std::find(tickets.begin(), tickets.end(), t) == tickets.end()) tickets.push_back(t);
        }
    }
    const cache::layer_gate gate(seqs_->pool(), std::move(tickets), seqs_->load_timeout_ms);
    result<model::forward_output> fwd = model_->forward(gate, items_);
    if (!fwd) return fwd.error();
    const int32_t vocab = vocab_size();
    prepare_output(plan, vocab, out);
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const int64_t rows = out.row_count[i];
        if (rows == 0) continue;
        const std::vector<float>& got = fwd->logits[i];
        // `last` asks the model for its default single row; `all` for one row per token.
        TANDEM_CHECK(static_cast<int64_t>(got.size()) == rows * vocab);
        std::memcpy(out.logits.data() + out.first_row[i] * vocab, got.data(),
                    got.size() * sizeof(float));
    }
    return status::ok();
}

}  // namespace tandem::engine
