// The one timing loop (util/timing_loop.h) with a fake kernel and a fake clock, and the sample statistics
// (util/sample_stats.h) on hand-written samples. Expected values are literals worked out by hand; nothing here
// measures speed.
#include <doctest/doctest.h>

#include "util/sample_stats.h"
#include "util/timing_loop.h"

#include <atomic>
#include <utility>
#include <vector>

using namespace kvsim;

TEST_CASE("sample_loop: warm-up calls run first and their values are dropped, after() sees each kept sample") {
    std::vector<int> called;
    std::vector<std::pair<int, double>> seen;
    const std::vector<double> v = sample_loop(
        {2, 3, nullptr},
        [&](int i) {
            called.push_back(i);
            return 10.0 * i;
        },
        [&](int i, double x) { seen.push_back({i, x}); });
    CHECK(called == std::vector<int>{0, 1, 2, 3, 4});  // 2 warm-up + 3 measured calls, in order
    CHECK(v == std::vector<double>{20, 30, 40});      // calls 2, 3, 4
    CHECK(seen == std::vector<std::pair<int, double>>{{2, 20}, {3, 30}, {4, 40}});

    called.clear();
    CHECK(sample_loop({0, 2, nullptr}, [&](int i) { called.push_back(i); return 1.0; }) == std::vector<double>{1, 1});
    CHECK(called == std::vector<int>{0, 1});  // no warm-up: every call is kept
    called.clear();
    CHECK(sample_loop({1, 0, nullptr}, [&](int i) { called.push_back(i); return 1.0; }).empty());
    CHECK(called == std::vector<int>{0});  // the warm-up alone
}

TEST_CASE("time_loop: the clock times every call, the warm-up's time is not a sample") {
    int kernel_calls = 0, clock_calls = 0;
    std::vector<int> indices;
    const call_clock fake = [&](const std::function<void()> & call) {
        call();
        return 100.0 * ++clock_calls;  // 100, 200, 300, ... ns
    };
    const std::vector<double> ns = time_loop({1, 4, nullptr}, [&](int i) {
        ++kernel_calls;
        indices.push_back(i);
    }, fake);
    CHECK(kernel_calls == 5);
    CHECK(clock_calls == 5);
    CHECK(indices == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(ns == std::vector<double>{200, 300, 400, 500});  // the warm-up's 100 is dropped

    // no clock: the host clock runs the call once per loop step and returns a duration
    kernel_calls = 0;
    const std::vector<double> host = time_loop({1, 2, nullptr}, [&](int) { ++kernel_calls; });
    CHECK(kernel_calls == 3);
    REQUIRE(host.size() == 2);
    CHECK(host[0] >= 0);
    CHECK(host[1] >= 0);
}

TEST_CASE("sample_loop: a raised stop flag ends it before the next call") {
    std::atomic<bool> stop{false};
    int calls = 0;
    const auto kernel = [&](int) {
        if (++calls == 3) stop = true;  // raised during the 3rd call (the 2nd measured one)
        return 1.0;
    };
    CHECK_THROWS_AS(sample_loop({1, 10, &stop}, kernel), loop_interrupted);
    CHECK(calls == 3);  // no 4th call

    calls = 0;  // raised before the loop: not even the warm-up runs
    CHECK_THROWS_AS(sample_loop({1, 10, &stop}, kernel), loop_interrupted);
    CHECK(calls == 0);

    stop = false;  // a flag that stays down changes nothing
    calls = 100;
    CHECK(sample_loop({1, 2, &stop}, kernel).size() == 2);
    CHECK(calls == 103);
}

TEST_CASE("summarize and median on hand-written samples") {
    // odd count: sorted 1 3 5 -> the middle one
    const sample_stats odd = summarize({5, 1, 3});
    CHECK(odd.n == 3);
    CHECK(odd.min == 1);
    CHECK(odd.median == 3);
    CHECK(odd.max == 5);
    // even count: sorted 1 2 3 4 -> (2 + 3) / 2
    const sample_stats even = summarize({4, 1, 3, 2});
    CHECK(even.n == 4);
    CHECK(even.min == 1);
    CHECK(even.median == 2.5);
    CHECK(even.max == 4);
    // GB/s and ratios are samples like any other: sorted 0.25 0.5 0.75 1.5 -> (0.5 + 0.75) / 2
    CHECK(median({1.5, 0.25, 0.75, 0.5}) == 0.625);
    CHECK(median({7}) == 7);
    // no samples: n 0, every value 0 (what "not measured" reads as)
    const sample_stats none = summarize({});
    CHECK(none.n == 0);
    CHECK(none.min == 0);
    CHECK(none.median == 0);
    CHECK(none.max == 0);
    CHECK(median({}) == 0);
}
