// report.html: one self-contained page (inline SVG and CSS, a few lines of JS, no network, no
// external fonts) with the occupancy over time, the cell-map heat strip, K-shift and slot-failure
// markers, SWA reuse, request latency CDFs and the measured attention bandwidth.
#pragma once

#include "report/bandwidth.h"
#include "report/cell_map_sampler.h"
#include "report/occupancy.h"
#include "sched/request_result.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

namespace kvsim {

// Most points of one line chart series; longer series keep evenly spaced rows (first and last
// included). Heat strips show at most HTML_MAX_STRIP_ROWS sampler rows, chosen the same way.
constexpr size_t HTML_MAX_POINTS = 1000;
constexpr size_t HTML_MAX_STRIP_ROWS = 400;

// Everything a report can show; the pointers may be null (section left out) and must outlive
// the call. `summary` is summary.json as run_replay writes it (config.caches gives kv_size and
// n_stream per cache; totals, peaks, latency are tabulated when present).
struct html_report_input {
    nlohmann::json summary = nlohmann::json::object();
    const std::vector<occupancy_row> * occupancy = nullptr;
    const std::vector<request_result> * requests = nullptr;
    const std::vector<bandwidth_row> * bandwidth = nullptr;
    const cell_map_sampler * cell_map = nullptr;
    double read_gbs_limit = 0;   // measured read bandwidth (GB/s) drawn on the bandwidth chart; 0 = none
};

// Writes the page. Line series are SVG <polyline data-series="NAME">, one per cache and series
// ("used cells", "n_kv"); heat strips are <svg class="strip" data-cache="NAME">. Never throws
// for missing summary keys (they are shown as "-").
void write_html_report(std::ostream & out, const html_report_input & in);

// Indices of at most max_points (>= 2) evenly spaced elements of [0, n), first and last kept.
std::vector<size_t> downsample_indices(size_t n, size_t max_points);

}  // namespace kvsim
