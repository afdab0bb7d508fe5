#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/prometheus_text.h"

using namespace tandem;

TEST_CASE("prometheus_text: counters and gauges carry HELP and TYPE lines") {
    std::string out;
    prometheus_text w(out, "tandem_");
    w.counter("steps_total", "Scheduler steps", 12);
    w.gauge("queue_depth", "Requests waiting", -1);
    w.ratio("hit_ratio", "hits / lookups", 0.25);
    CHECK(out == "# HELP tandem_steps_total Scheduler steps\n"
                 "# TYPE tandem_steps_total counter\n"
                 "tandem_steps_total 12\n"
                 "# HELP tandem_queue_depth Requests waiting\n"
                 "# TYPE tandem_queue_depth gauge\n"
                 "tandem_queue_depth -1\n"
                 "# HELP tandem_hit_ratio hits / lookups\n"
                 "# TYPE tandem_hit_ratio gauge\n"
                 "tandem_hit_ratio 0.250000\n");
}

TEST_CASE("prometheus_text: one labelled family lists its values in order") {
    std::string out;
    prometheus_text(out, "x_").counters_by("jobs_total", "Jobs", "result",
                                           {{"ok", 3}, {"failed", 0}});
    CHECK(out == "# HELP x_jobs_total Jobs\n# TYPE x_jobs_total counter\n"
                 "x_jobs_total{result=\"ok\"} 3\nx_jobs_total{result=\"failed\"} 0\n");
}

TEST_CASE("prometheus_text: a families table writes each row as counter() or gauge() would") {
    std::string table, calls;
    prometheus_text(table, "p_").families({{metric_type::counter, "a_total", "A", 3},
                                           {metric_type::gauge, "b", "B", -2}});
    prometheus_text one(calls, "p_");
    one.counter("a_total", "A", 3);
    one.gauge("b", "B", -2);
    CHECK(table == calls);
    CHECK(table == "# HELP p_a_total A\n# TYPE p_a_total counter\np_a_total 3\n"
                   "# HELP p_b B\n# TYPE p_b gauge\np_b -2\n");
}

TEST_CASE("prometheus_text: by_index labels an enumeration, optionally only its non-zero slots") {
    const int64_t counts[] = {4, 0, 7};
    const char* names[] = {"x", "y", "z"};
    auto label = [&](size_t i) { return names[i]; };
    auto value = [&](size_t i) { return counts[i]; };
    using lc = prometheus_text::label_count;
    CHECK(prometheus_text::by_index(3, label, value) ==
          std::vector<lc>{{"x", 4}, {"y", 0}, {"z", 7}});
    CHECK(prometheus_text::by_index(3, label, value, true) == std::vector<lc>{{"x", 4}, {"z", 7}});
}

TEST_CASE("prometheus_text: with_prefix extends the prefix and appends to the same text") {
    std::string out;
    prometheus_text base(out, "tandem_pd_");
    base.with_prefix("decode_transport_").counter("frames_sent_total", "Frames", 5);
    base.counter("late_writes_total", "Late", 1);
    CHECK(out.find("tandem_pd_decode_transport_frames_sent_total 5\n") != std::string::npos);
    CHECK(out.find("tandem_pd_late_writes_total 1\n") != std::string::npos);
}

TEST_CASE("prometheus_text: histograms take the writer's prefix") {
    histogram h({1.0});
    h.observe(0.5);
    std::string out;
    prometheus_text(out, "tandem_").histogram("load_seconds", "Loads", h.snapshot());
    CHECK(out == "# HELP tandem_load_seconds Loads\n# TYPE tandem_load_seconds histogram\n"
                 "tandem_load_seconds_bucket{le=\"1\"} 1\n"
                 "tandem_load_seconds_bucket{le=\"+Inf\"} 1\n"
                 "tandem_load_seconds_sum 0.5\ntandem_load_seconds_count 1\n");
}
