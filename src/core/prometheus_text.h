// core/prometheus_text.h — Appends metric families to a /metrics body in the Prometheus text
// format (version 0.0.4).
//
// Every producer of /metrics text (api's engine and HTTP metrics, topo's pd metrics) writes
// through this one writer, so `# HELP` / `# TYPE` lines, label syntax and number formatting live
// in one place. A writer carries a name prefix prepended to every family it writes
// (`tandem_pd_decode_transport_` + `frames_sent_total`), which lets one rendering function serve
// two metric sets that differ only by prefix.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/histogram.h"

namespace tandem {

class prometheus_text {
  public:
    // One labelled sample: the label's value and the sample's value.
    using label_count = std::pair<std::string, int64_t>;

    // Appends to `out`, which must outlive the writer.
    explicit prometheus_text(std::string& out, std::string prefix = {});

    // A writer appending to the same text with `more` added to this writer's prefix.
    prometheus_text with_prefix(std::string_view more) const;

    void counter(std::string_view name, std::string_view help, int64_t value);
    void gauge(std::string_view name, std::string_view help, int64_t value);
    // A fractional gauge, written with six decimals.
    void ratio(std::string_view name, std::string_view help, double value);
    // One counter family with one label: `name{label="value"} count` per entry, in order.
    void counters_by(std::string_view name, std::string_view help, std::string_view label,
                     const std::vector<label_count>& values);
    void histogram(std::string_view name, std::string_view help, const histogram_snapshot& h);

  private:
    void family(const std::string& full, std::string_view help, std::string_view type);

    std::string* out_;
    std::string prefix_;
};

}  // namespace tandem
