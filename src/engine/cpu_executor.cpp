#include "engine/cpu_executor.h"

#include <algorithm>

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

namespace {

model::logit_rows logit_rows_for(logits_mode m) {
    switch (m) {
        case logits_mode::none: return model::logit_rows::none;
        case logits_mode::last: return model::logit_rows::last;
        case logits_mode::all: return model::logit_rows::all;
    }
    return model::logit_rows::none;
}

}  // namespace

// The plan's rows (number_output_rows) are the model's logit rows in the same order, so the head
// writes them straight into out.logits: no copy, and no zeroing first.
status cpu_executor::execute(const step_plan& plan, step_output& out) {
    items_.clear();
    std::vector<std::shared_ptr<const cache::load_ticket>> tickets;
    for (const plan_item& it : plan.items) {
        items_.push_back({it.tokens, it.start_position, seqs_->slot(it.sequence), logit_rows_for(it.logits)});
        if (const auto* loads = seqs_->loads(it.sequence)) {
            for (const auto& t : *loads)
                if (std::find(tickets.begin(), tickets.end(), t) == tickets.end()) tickets.push_back(t);
        }
    }
    const int64_t rows = number_output_rows(plan, vocab_size(), out);
    const cache::layer_gate gate(seqs_->pool(), std::move(tickets), seqs_->load_timeout_ms);
    TANDEM_RETURN_IF_ERROR(model_->forward_into(gate, items_, out.logits));
    TANDEM_CHECK(static_cast<int64_t>(out.logits.size()) == rows * out.vocab);
    return status::ok();
}

}  // namespace tandem::engine
