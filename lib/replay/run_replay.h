// `kvsim replay`: read the trace, run it through the cache, write the requested outputs.
#pragma once

#include "replay/replay_hooks.h"
#include "replay/replay_options.h"

#include <ostream>

namespace kvsim {

// Runs the replay and prints the terminal summary to `term` (unless quiet). Output files are
// written atomically (temp + rename), only after the whole replay succeeded. `hooks` (optional)
// times the real kernels. Throws input_error (bad trace), usage_error (bad options),
// std::runtime_error (I/O).
void run_replay(const replay_options & opt, std::ostream & term, replay_hooks * hooks = nullptr);

}  // namespace kvsim
