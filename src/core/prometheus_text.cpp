#include "core/prometheus_text.h"

#include <fmt/format.h>

namespace tandem {

prometheus_text::prometheus_text(std::string& out, std::string prefix)
    : out_(&out), prefix_(std::move(prefix)) {}

prometheus_text prometheus_text::with_prefix(std::string_view more) const {
    return prometheus_text(*out_, prefix_ + std::string(more));
}

void prometheus_text::family(const std::string& full, std::string_view help,
                             std::string_view type) {
    *out_ += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", full, help, type);
}

void prometheus_text::integer(metric_type type, std::string_view name, std::string_view help,
                              int64_t value) {
    const std::string full = prefix_ + std::string(name);
    family(full, help, type == metric_type::counter ? "counter" : "gauge");
    *out_ += fmt::format("{} {}\n", full, value);
}

void prometheus_text::families(std::initializer_list<metric_family> list) {
    for (const metric_family& f : list) integer(f.type, f.name, f.help, f.value);
}

void prometheus_text::counter(std::string_view name, std::string_view help, int64_t value) {
    integer(metric_type::counter, name, help, value);
}

void prometheus_text::gauge(std::string_view name, std::string_view help, int64_t value) {
    integer(metric_type::gauge, name, help, value);
}

void prometheus_text::ratio(std::string_view name, std::string_view help, double value) {
    const std::string full = prefix_ + std::string(name);
    family(full, help, "gauge");
    *out_ += fmt::format("{} {:.6f}\n", full, value);
}

void prometheus_text::counters_by(std::string_view name, std::string_view help,
                                  std::string_view label, const std::vector<label_count>& values) {
    const std::string full = prefix_ + std::string(name);
    family(full, help, "counter");
    for (const auto& [value, count] : values) {
        *out_ += fmt::format("{}{{{}=\"{}\"}} {}\n", full, label, value, count);
    }
}

void prometheus_text::histogram(std::string_view name, std::string_view help,
                                const histogram_snapshot& h) {
    *out_ += h.render_prometheus(prefix_ + std::string(name), help);
}

}  // namespace tandem
