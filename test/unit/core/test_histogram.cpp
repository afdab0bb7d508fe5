#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "core/histogram.h"

using namespace tandem;

TEST_CASE("histogram: buckets are inclusive upper bounds and render cumulatively") {
    histogram h({1.0, 2.0, 5.0});
    h.observe(0.5);
    h.observe(1.0);   // on the bound: counted in le=1
    h.observe(1.5);
    h.observe(7.0);   // above every bound: +Inf only
    auto s = h.snapshot();
    CHECK(s.counts == std::vector<int64_t>{2, 1, 0, 1});
    CHECK(s.count == 4);
    CHECK(s.sum == doctest::Approx(10.0));
    std::string text = s.render_prometheus("tandem_x_seconds", "Example.");
    CHECK(text.find("# TYPE tandem_x_seconds histogram\n") != std::string::npos);
    CHECK(text.find("tandem_x_seconds_bucket{le=\"1\"} 2\n") != std::string::npos);
    CHECK(text.find("tandem_x_seconds_bucket{le=\"2\"} 3\n") != std::string::npos);
    CHECK(text.find("tandem_x_seconds_bucket{le=\"5\"} 3\n") != std::string::npos);
    CHECK(text.find("tandem_x_seconds_bucket{le=\"+Inf\"} 4\n") != std::string::npos);
    CHECK(text.find("tandem_x_seconds_count 4\n") != std::string::npos);
}

TEST_CASE("histogram: concurrent observers lose no counts") {
    histogram h(histogram::power_of_two_bounds(64));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&h] {
            for (int i = 0; i < 10000; ++i) h.observe(static_cast<double>(i % 100));
        });
    }
    for (auto& t : threads) t.join();
    auto s = h.snapshot();
    CHECK(s.count == 40000);
    CHECK(s.sum == doctest::Approx(4.0 * 100.0 * 4950.0));
}
