// `kvsim plan TRACE --model M --weights W --device D --memory 24GiB [grid] [--slo-ttft S --slo-tpot S]`:
// replays the trace for every combination of the grid's llama-server settings (lib/plan) and prints
// the ranked table; --out DIR writes plan.csv, plan.json and plan.html atomically.
#pragma once

#include "common/replay_cli.h"
#include "plan/plan_options.h"

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

struct plan_cli {
    replay_cli base;   // the workload, server and device options, as kvsim replay spells them
    std::vector<uint32_t> n_parallel, n_ctx, n_ubatch;
    std::vector<std::string> type_k, type_v, kv_unified;
    std::vector<int32_t> cache_ram;
    std::string memory, out_dir;
    int64_t fit_target_mib = 1024;
    double slo_ttft = 0, slo_tpot = 0;
    size_t max_points = 10000, top = 20;
    unsigned jobs = 0;
    bool find_rate = false;
    double slo_attainment = 0.9;
    int rate_steps = 6;
    std::string shard;
    std::vector<std::string> merge_files;   // kvsim plan merge FILE...
    CLI::App * merge = nullptr;

    void add_to(CLI::App & cmd);
    // Returns the exit status: EXIT_OK (also when nothing fits: the table says why), 128 + signal
    // when interrupted (the finished points are written). Throws usage_error / input_error (exit 2).
    int run(std::ostream & term);
    // kvsim plan merge: the shards' plan.json joined into the unsharded plan's table and outputs.
    int run_merge(std::ostream & term);

private:
    plan_options finish();
};

}  // namespace kvsim
