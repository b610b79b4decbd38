#include "bench/bench_result.h"

#include "util/sample_stats.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace kvsim {

time_stats time_stats_of(std::vector<double> ns) {
    const sample_stats s = summarize(std::move(ns));
    return {s.min, s.median, s.max, s.n};
}

const char * to_string(point_status s) {
    switch (s) {
        case point_status::ok: return "ok";
        case point_status::skipped: return "skipped";
        case point_status::failed: return "failed";
    }
    return "?";  // unreachable: every enumerator is listed (-Wswitch)
}

point_status parse_point_status(const std::string & s) {
    for (const point_status v : {point_status::ok, point_status::skipped, point_status::failed}) {
        if (s == to_string(v)) return v;
    }
    throw std::invalid_argument(fmt::format("status '{}'; expected 'ok', 'skipped' or 'failed'", s));
}

double point_result::gbs() const { return fa.n ? (double) kv_bytes / fa.median_ns : 0.0; }
double point_result::gbs_best() const { return fa.n ? (double) kv_bytes / fa.min_ns : 0.0; }
double point_result::frac_limit() const { return limit_read_gbs > 0 ? gbs() / limit_read_gbs : 0.0; }
double point_result::tokens_per_s() const { return fa.n ? (double) point.batch * 1e9 / fa.median_ns : 0.0; }
double point_result::eigen_ratio() const { return fa.n && eigen.n ? eigen.median_ns / fa.median_ns : 0.0; }
double point_result::ref_ratio() const { return fa.n && ref.n ? ref.median_ns / fa.median_ns : 0.0; }

bool probe_core_bound(const run_limit & l, int threads) {
    return threads > 1 && l.read_gbs_one_thread > 0 && l.read_gbs >= 0.75 * threads * l.read_gbs_one_thread;
}

}  // namespace kvsim
