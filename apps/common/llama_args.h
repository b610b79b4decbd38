// llama.cpp's multi-letter single-dash flags (-np, -ub, -kvu, -ctk, -ctv, -fa) for CLI11, which
// only knows one-letter short options: they are rewritten to their long names before parsing.
#pragma once

#include "kv/context.h"

#include <string>
#include <vector>

namespace kvsim {

// argv with -np -> --parallel, -ub -> --ubatch-size, -kvu -> --kv-unified,
// -ctk -> --cache-type-k, -ctv -> --cache-type-v, -fa -> --flash-attn, -no-kvu -> --no-kv-unified,
// -cram -> --cache-ram, -ctxcp -> --ctx-checkpoints, -sps -> --slot-prompt-similarity,
// -cms -> --checkpoint-min-step (also "-np=4" forms).
std::vector<std::string> rewrite_llama_args(int argc, char ** argv);

// compute_context_sizes' checks (lib/kv/context.cpp, whose messages name fields, not flags) said
// in the flags' names, before any work: n_ctx (-c), n_seq_max (-np), n_batch / n_ubatch (-b, -ub),
// a quantized V cache without -fa on. Throws usage_error.
void check_context_flags(const context_params & p);

}  // namespace kvsim
