// llama-server's context size for a request trace when -c does not pin it: the order and the rules of
// tools/server/server.cpp (main: -np auto, --kv-unified-per-slot) and common/fit.cpp (common_params_fit_impl,
// run by common_init_from_params before the context exists).
#pragma once

#include "replay/replay_options.h"

#include <string>

namespace kvsim {

// Resolves opt.ctx.n_ctx (and n_seq_max / kv_unified for -np auto) in place, as the real server would:
//  1. -np auto: 4 slots in a unified cache (server.cpp; -no-kvu is then refused: usage_error).
//  2. --kv-unified-per-slot N with -c absent (not -c 0): n_ctx = slots x N (server.cpp), a context the fit keeps.
//  3. --fit on (the default): with -c absent or 0, n_ctx_train x slots (common_params_fit_impl: "context size unset
//     -> using n_ctx_train * n_seq_max"), shrunk toward -fitc per stream when weights + K/V + compute do not leave the
//     -fitt margin of the device's memory (opt.device_memory, else the profile's memory_mib; unknown: not shrunk);
//     -c 0 sets -fitc to UINT32_MAX upstream (common/arg.cpp), so it is never shrunk. A given -c is kept.
//  4. --fit off with -c absent or 0: n_ctx_train for all slots together (llama_context's default).
// Returns how n_ctx was chosen, one line for the terminal and summary.json ("-c as given" when -c gave it).
std::string size_server_context(replay_options & opt);

}  // namespace kvsim
