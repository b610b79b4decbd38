// `kvsim replay`: read the trace, run it through the cache, write the requested outputs.
#pragma once

#include "replay/replay_hooks.h"
#include "kv/memory_breakdown.h"
#include "replay/replay_options.h"

#include "sched/request_result.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

namespace kvsim {

// Runs the replay (the skeleton in run_replay.cpp with the op-trace or the request-trace driver,
// replay_driver.h) and prints the terminal summary to `term` (unless quiet). First the checks of
// the options (opt.validate()), then the automatic sizes (a request trace as llama-server sizes it:
// replay/server_sizing.h; an op trace: n_ctx 0 -> the model's n_ctx_train, -np auto -> 1 sequence;
// the two told apart by the trace's first line), then check_host_memory. Output files are
// written atomically (temp + rename), all together, only after the whole replay succeeded
// (replay_outputs.h). `hooks` (optional) times the real kernels. Throws input_error (bad trace),
// option_error / usage_error (bad options), std::runtime_error (I/O).
void run_replay(const replay_options & opt, std::ostream & term, replay_hooks * hooks = nullptr);

// What one replay found, for a caller that runs many (kvsim plan): summary.json's object and each
// request's result (empty for an op trace).
struct replay_result {
    nlohmann::json summary;
    std::vector<request_result> requests;
};

// run_replay with no output files, no terminal table, no progress bar and no kernels (the options'
// outputs, quiet, progress and kernel backend are ignored). Throws as run_replay.
replay_result run_replay_quiet(const replay_options & opt);

// The replay's memory as llama.cpp and llama-server would allocate it (kv/memory_breakdown.h):
// the weights in opt.weights' type (f16 when absent), K/V and buffers of a context with params p and sizes s, and for a
// request trace the server's --cache-ram (an op trace has no server: 0) and, with -md, the draft model's weights (in the
// same type), K/V and compute buffer, which llama-server fits together with the target's.
memory_breakdown replay_memory(const replay_options & opt, const context_params & p, const context_sizes & s, bool request_trace);
// The terminal's "memory" row: "device X GiB = weights + K/V + compute; host: ...".
std::string memory_line(const memory_breakdown & b);
// summary.json's "memory" (bytes; cache_ram -1 = no limit).
nlohmann::json memory_json(const memory_breakdown & b);

}  // namespace kvsim
