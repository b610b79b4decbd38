// kvbench outputs: terminal table, kvbench.csv, kvbench.json, kvbench.svg (files written atomically).
#pragma once

#include "bench/bench_result.h"

#include <ostream>
#include <string>

namespace kvsim {

// Header of kvbench.csv, one column per name, comma-separated.
extern const char * const kvbench_csv_header;

// Human-readable table: machine, limit, notes, then one row per point (times in us, GB/s from the median).
void write_table(std::ostream & os, const sweep_output & o);
// One CSV row per point (kvbench_csv_header); times in ns, bandwidths in GB/s, ratios dimensionless.
void write_csv(std::ostream & os, const sweep_output & o);
// Self-contained SVG: flash-attention median time and GB/s vs ctx (log2 x, log10 y for time), one line per
// (kv type, batch), the measured read bandwidth as a horizontal roofline on the GB/s panel.
void write_svg(std::ostream & os, const sweep_output & o);

// Write DIR/kvbench.csv, DIR/kvbench.json, DIR/kvbench.svg atomically (creates DIR). Throws input_error (exit 2)
// naming --out when DIR cannot be created, std::runtime_error on other I/O failures.
void write_outputs(const std::string & dir, const sweep_output & o);
// Refuse an output directory before any work: empty, an existing non-directory (or a path through one), or one
// that cannot be created or written (the nearest existing ancestor is not a writable directory). Throws
// input_error(option, 0, dir, why).
void check_output_dir(const std::string & option, const std::string & dir);
// DIR/kvbench.json for a directory, the path itself otherwise: the file read_output reads.
std::string kvbench_json_path(const std::string & dir_or_file);
// Read DIR/kvbench.json (or a .json file path). Throws input_error(path, 0, "", why) when missing or malformed.
sweep_output read_output(const std::string & dir_or_file);

}  // namespace kvsim
