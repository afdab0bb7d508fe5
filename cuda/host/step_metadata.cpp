#include "cuda/host/step_metadata.h"

#include <algorithm>
#include <string>

namespace tandem::cuda {

int64_t step_metadata::ring_keys(int64_t r) const {
    const int64_t start = item_start[row_item[r]];
    return std::max<int64_t>(0, start - window_first[r]);
}

result<step_metadata> plan_step_metadata(const engine::step_plan& plan, const step_limits& limits) {
    if (limits.sliding_window <= 0) return make_error(error_code::invalid_argument, "step metadata: sliding window must be positive");
    step_metadata m;
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const engine::plan_item& it = plan.items[i];
        const std::string where = "step " + std::to_string(plan.step) + " item " + std::to_string(i);
        if (it.tokens.empty()) return make_error(error_code::invalid_argument, where + ": no tokens");
        if (it.start_position < 0) return make_error(error_code::invalid_argument, where + ": negative start position");
        m.item_row0.push_back(m.rows);
        m.item_rows.push_back(static_cast<int64_t>(it.tokens.size()));
        m.item_start.push_back(it.start_position);
        for (size_t k = 0; k < it.tokens.size(); ++k) {
            const int32_t tok = it.tokens[k];
            if (tok < 0 || tok >= limits.vocab_size)
                return make_error(error_code::out_of_range, where + ": token id " + std::to_string(tok) + " outside [0, " +
                                                                std::to_string(limits.vocab_size) + ")");
            const int64_t pos = it.start_position + static_cast<int64_t>(k);
            m.token.push_back(tok);
            m.position.push_back(pos);
            m.row_item.push_back(static_cast<int32_t>(i));
            m.window_first.push_back(std::max<int64_t>(0, pos - limits.sliding_window + 1));
        }
        m.rows += static_cast<int64_t>(it.tokens.size());
        const int64_t first = m.item_row0.back(), n = m.item_rows.back();
        switch (it.logits) {
            case engine::logits_mode::none: m.out_first_row.push_back(-1); break;
            case engine::logits_mode::last:
                m.out_first_row.push_back(static_cast<int64_t>(m.head_rows.size()));
                m.head_rows.push_back(first + n - 1);
                break;
            case engine::logits_mode::all:
                m.out_first_row.push_back(static_cast<int64_t>(m.head_rows.size()));
                for (int64_t r = first; r < first + n; ++r) m.head_rows.push_back(r);
                break;
        }
    }
    if (limits.max_rows > 0 && m.rows > limits.max_rows)
        return make_error(error_code::out_of_range, "step " + std::to_string(plan.step) + ": " + std::to_string(m.rows) +
                                                        " rows exceed the device scratch (" +
                                                        std::to_string(limits.max_rows) + " rows)");
    return m;
}

}  // namespace tandem::cuda
