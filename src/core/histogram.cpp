#include "core/histogram.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace tandem {

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<int64_t>[bounds_.size() + 1]) {
    TANDEM_CHECK_MSG(std::is_sorted(bounds_.begin(), bounds_.end()),
                     "histogram bounds must ascend");
    for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void histogram::observe(double value) {
    // First bound >= value: Prometheus buckets are inclusive upper bounds.
    auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
    counts_[static_cast<size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
}

histogram_snapshot histogram::snapshot() const {
    histogram_snapshot s;
    s.bounds = bounds_;
    s.counts.resize(bounds_.size() + 1);
    for (size_t i = 0; i <= bounds_.size(); ++i) s.counts[i] = counts_[i].load();
    s.sum = sum_.load();
    // The count is the sum of the buckets copied, so a scrape is self-consistent even while
    // observations race with it.
    s.count = 0;
    for (int64_t c : s.counts) s.count += c;
    return s;
}

std::vector<double> histogram::latency_seconds_bounds() {
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0,   2.5,    5.0,   10.0, 25.0,  60.0};
}

std::vector<double> histogram::power_of_two_bounds(int64_t max) {
    std::vector<double> b;
    for (int64_t v = 1; v <= max; v *= 2) b.push_back(static_cast<double>(v));
    return b;
}

std::string histogram_snapshot::render_prometheus(std::string_view name,
                                                  std::string_view help) const {
    std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
        cumulative += counts[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cumulative);
    }
    cumulative += counts.empty() ? 0 : counts.back();
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
    out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum, name, cumulative);
    return out;
}

}  // namespace tandem
