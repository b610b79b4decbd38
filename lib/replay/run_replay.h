// `kvsim replay`: read the trace, run it through the cache, write the requested outputs.
#pragma once

#include "replay/replay_hooks.h"
#include "replay/replay_options.h"

#include <ostream>

namespace kvsim {

// Resolves llama-server's automatic sizes in place: n_ctx 0 -> the model's n_ctx_train; with
// n_parallel_auto, 4 slots and a unified cache for a request trace (server.cpp: n_parallel < 0),
// 1 sequence for an op trace. Reads the trace's first line to tell them apart.
void resolve_auto_sizes(replay_options & opt);

// Runs the replay (the skeleton in run_replay.cpp with the op-trace or the request-trace driver,
// replay_driver.h) and prints the terminal summary to `term` (unless quiet). Output files are
// written atomically (temp + rename), all together, only after the whole replay succeeded
// (replay_outputs.h). `hooks` (optional) times the real kernels. Throws input_error (bad trace),
// usage_error (bad options), std::runtime_error (I/O).
void run_replay(const replay_options & opt, std::ostream & term, replay_hooks * hooks = nullptr);

}  // namespace kvsim
