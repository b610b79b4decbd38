// `kvsim plan`'s outputs: the ranked table on the terminal, plan.csv (one row per point),
// plan.json (the options and every point) and plan.html (the table and the Pareto front as a chart).
#pragma once

#include "plan/plan.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace kvsim {

// The point's settings in llama.cpp's spelling: "-np 4 -c 32768 -ctk q8_0 -ctv q8_0 -kvu -ub 512 -cram 8192".
std::string plan_config_flags(const plan_config & c);

// The ranked table: ok points first (at most `max_rows`, 0 = all), then one line per other status
// with its count and the first reason.
void print_plan_table(std::ostream & out, const plan_result & r, size_t max_rows);

// plan.csv: header then one row per point in rank order (columns: docs/reports.md).
void write_plan_csv(std::ostream & out, const plan_result & r);

// plan.json: the header and every point; plan merge reads it back (merge_plan_shards).
nlohmann::json plan_json(const plan_result & r);

// plan.html: a self-contained page (no scripts from the network): the ranked table and an SVG
// scatter of goodput against TTFT p99 with the Pareto front joined.
void write_plan_html(std::ostream & out, const plan_result & r);

}  // namespace kvsim
