// `kvsim replay`: read the trace, run it through the cache, write the requested outputs.
#pragma once

#include "replay/replay_hooks.h"
#include "replay/replay_options.h"

#include <ostream>

namespace kvsim {

// Runs the replay (the skeleton in run_replay.cpp with the op-trace or the request-trace driver,
// replay_driver.h) and prints the terminal summary to `term` (unless quiet). First the checks of
// the options (opt.validate()), then llama-server's automatic sizes (n_ctx 0 -> the model's
// n_ctx_train; n_parallel_auto: 4 slots in a unified cache for a request trace, 1 sequence for an
// op trace, told apart by the trace's first line), then check_host_memory. Output files are
// written atomically (temp + rename), all together, only after the whole replay succeeded
// (replay_outputs.h). `hooks` (optional) times the real kernels. Throws input_error (bad trace),
// option_error / usage_error (bad options), std::runtime_error (I/O).
void run_replay(const replay_options & opt, std::ostream & term, replay_hooks * hooks = nullptr);

}  // namespace kvsim
