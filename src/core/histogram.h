// core/histogram.h — A thread-safe latency/size histogram with Prometheus-style buckets.
//
// observe() is lock-free (one atomic add per bucket hit, one for the sum) so the scheduler can
// record every step without contention; snapshot() copies the counters for a /metrics scrape.
// Buckets are fixed at construction (upper bounds, ascending); an implicit +Inf bucket catches
// everything above the last bound. Counts are stored per bucket and made cumulative only when
// rendered, as Prometheus' text format expects (`_bucket{le="x"}` counts observations <= x).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct histogram_snapshot {
    std::vector<double> bounds;   // upper bounds, ascending (the +Inf bucket is implicit)
    std::vector<int64_t> counts;  // per bucket, NOT cumulative; size bounds.size() + 1
    double sum = 0.0;
    int64_t count = 0;

    // `# HELP`, `# TYPE name histogram`, cumulative `name_bucket{le=...}`, `name_sum`,
    // `name_count`, each line ending in '\n'.
    std::string render_prometheus(std::string_view name, std::string_view help) const;
};

class histogram {
public:
    explicit histogram(std::vector<double> bounds);
    histogram(const histogram&) = delete;
    histogram& operator=(const histogram&) = delete;

    void observe(double value);
    histogram_snapshot snapshot() const;
    std::string render_prometheus(std::string_view name, std::string_view help) const {
        return snapshot().render_prometheus(name, help);
    }

    // Bounds for latencies in seconds: 1 ms … ~60 s, roughly x2.5 apart.
    static std::vector<double> latency_seconds_bounds();
    // Bounds for counts (batch sizes): 1, 2, 4, … up to `max`.
    static std::vector<double> power_of_two_bounds(int64_t max);

private:
    std::vector<double> bounds_;
    std::unique_ptr<std::atomic<int64_t>[]> counts_;
    std::atomic<double> sum_{0.0};
    std::atomic<int64_t> count_{0};
};

}  // namespace tandem
