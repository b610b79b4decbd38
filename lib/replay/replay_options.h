// Everything `kvsim replay` can be told; filled by apps/kvsim.cpp, consumed by run_replay.
#pragma once

#include "kv/context.h"
#include "model/model.h"

#include <optional>
#include <string>

namespace kvsim {

struct replay_options {
    std::string trace;                  // op trace (CSV) or request trace (Azure/Mooncake/BurstGPT)
    std::string format = "auto";        // auto | ops | azure | mooncake | burstgpt
    model_shape model = model_preset("llama-3-8b");
    context_params ctx;
    std::string dump_cells;             // kvoracle-format JSON lines, "" = none
    std::string out_dir;                // reports (summary.json, occupancy.csv, ...), "" = none
    bool quiet = false;                 // no terminal summary
    std::optional<bool> progress;       // unset = only when stderr is a terminal
};

// Exit statuses of the CLIs.
enum exit_status : int { EXIT_OK = 0, EXIT_FAILURE_INTERNAL = 1, EXIT_BAD_INPUT = 2, EXIT_INTERRUPTED = 130 };

}  // namespace kvsim
