// kvbench.json: a sweep's output as JSON (schema "kvbench-sweep/1") and back. The keys of time_stats and of a
// point's timings come from the tables in bench/bench_result.h.
#pragma once

#include "bench/bench_result.h"

#include <nlohmann/json.hpp>

namespace kvsim {

nlohmann::json to_json(const sweep_output & o);
// Throws std::runtime_error naming the missing/invalid field ("kvbench sweep output: point N has status 'x'; ...").
// Fields added after the first files were written (adj_*, roof_*, err_check, kernel_path, read_gbs_one_thread)
// read as "not measured" when absent.
sweep_output sweep_output_from_json(const nlohmann::json & j);

}  // namespace kvsim
