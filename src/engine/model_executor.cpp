#include "engine/model_executor.h"

namespace tandem::engine {

int64_t number_output_rows(const step_plan& plan, int32_t vocab, step_output& out) {
    out.vocab = vocab;
    out.first_row.assign(plan.items.size(), -1);
    out.row_count.assign(plan.items.size(), 0);
    int64_t rows = 0;
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const plan_item& it = plan.items[i];
        int64_t n = it.logits == logits_mode::none   ? 0
                    : it.logits == logits_mode::last ? 1
                                                     : static_cast<int64_t>(it.tokens.size());
        if (n > 0) out.first_row[i] = rows;
        out.row_count[i] = n;
        rows += n;
    }
    return rows;
}

void prepare_output(const step_plan& plan, int32_t vocab, step_output& out) {
    const int64_t rows = number_output_rows(plan, vocab, out);
    out.logits.assign(static_cast<size_t>(rows * vocab), 0.0f);
}

}  // namespace tandem::engine
