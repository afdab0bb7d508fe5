// core/prometheus_text.h — Appends metric families to a /metrics body in the Prometheus text
// format (version 0.0.4).
//
// Every producer of /metrics text (api's engine and HTTP metrics, engine's prefix-cache metrics,
// topo's pd metrics) writes through this one writer, so `# HELP` / `# TYPE` lines, label syntax
// and number formatting live in one place, and a producer only lists its families: most as one
// `families({...})` table of unlabelled counters and gauges, the rest (ratios, labelled counters,
// histograms) one call each. A writer carries a name prefix prepended to every family it writes
// (`tandem_pd_decode_transport_` + `frames_sent_total`), which lets one rendering function serve
// two metric sets that differ only by prefix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/histogram.h"

namespace tandem {

enum class metric_type { counter, gauge };

// One unlabelled integer family: a row of a producer's table.
struct metric_family {
    metric_type type;
    std::string_view name;  // without the writer's prefix
    std::string_view help;
    int64_t value;
};

class prometheus_text {
  public:
    // One labelled sample: the label's value and the sample's value.
    using label_count = std::pair<std::string, int64_t>;

    // Appends to `out`, which must outlive the writer.
    explicit prometheus_text(std::string& out, std::string prefix = {});

    // A writer appending to the same text with `more` added to this writer's prefix.
    prometheus_text with_prefix(std::string_view more) const;

    // Each family in the order listed.
    void families(std::initializer_list<metric_family> list);
    void counter(std::string_view name, std::string_view help, int64_t value);
    void gauge(std::string_view name, std::string_view help, int64_t value);
    // A fractional gauge, written with six decimals.
    void ratio(std::string_view name, std::string_view help, double value);
    // One counter family with one label: `name{label="value"} count` per entry, in order.
    void counters_by(std::string_view name, std::string_view help, std::string_view label,
                     const std::vector<label_count>& values);
    void histogram(std::string_view name, std::string_view help, const histogram_snapshot& h);

    // The samples of a counter family labelled by an enumeration 0..count-1: (label_of(i),
    // value_of(i)) in order; zero values are left out when `only_nonzero` (labels seen only).
    template <class LabelOf, class ValueOf>
    static std::vector<label_count> by_index(size_t count, LabelOf label_of, ValueOf value_of,
                                             bool only_nonzero = false) {
        std::vector<label_count> out;
        for (size_t i = 0; i < count; ++i) {
            const int64_t v = value_of(i);
            if (!only_nonzero || v != 0) out.emplace_back(label_of(i), v);
        }
        return out;
    }

  private:
    void family(const std::string& full, std::string_view help, std::string_view type);
    void integer(metric_type type, std::string_view name, std::string_view help, int64_t value);

    std::string* out_;
    std::string prefix_;
};

}  // namespace tandem
