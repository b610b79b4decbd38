// `kvsim calibrate BENCH.json [...] [--model PRESET[,PRESET...]] [--weights TYPE] [--device BASE] [-o profile.json]`:
// fits a device profile to llama-bench results (time/calibrate.h), prints the residual of every
// result and writes the profile atomically (nothing is written when the input is refused).
#pragma once

#include <CLI/CLI.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

struct calibrate_cli {
    std::vector<std::string> files;
    std::vector<std::string> model_names;   // --model: the candidates (empty: every preset)
    std::string weights, device = "cpu", out, name = "calibrated";
    int threads = 0;
    bool predict = false;
    std::string attention_cells;   // n_kv | visible: overrides the base profile's   // no fit: predict each result with --device and print the errors

    void add_to(CLI::App & cmd);
    // Returns the exit status; throws input_error / usage_error for bad input (exit 2).
    int run(std::ostream & term);
};

}  // namespace kvsim
