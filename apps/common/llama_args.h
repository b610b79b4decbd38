// llama.cpp's multi-letter single-dash flags (-np, -ub, -kvu, -ctk, -ctv, -fa) for CLI11, which
// only knows one-letter short options: they are rewritten to their long names before parsing.
// And the library's refusals of options said in a CLI's flags.
#pragma once

#include "core/errors.h"

#include <map>
#include <string>
#include <vector>

namespace kvsim {

// argv with -np -> --parallel, -ub -> --ubatch-size, -kvu -> --kv-unified,
// -ctk -> --cache-type-k, -ctv -> --cache-type-v, -fa -> --flash-attn, -no-kvu -> --no-kv-unified,
// -cram -> --cache-ram, -ctxcp -> --ctx-checkpoints, -sps -> --slot-prompt-similarity,
// -cms -> --checkpoint-min-step, -fit -> --fit, -fitc -> --fit-ctx, -fitt -> --fit-target, -cb / -nocb -> --cont-batching / --no-cont-batching, -n -> --predict for replay and plan (also "-np=4" forms).
std::vector<std::string> rewrite_llama_args(int argc, char ** argv);
// The aliases rewrite_llama_args applies (-n aside), short -> long: --help shows them beside the long names.
const std::map<std::string, std::string> & llama_flag_aliases();

// A library field and the CLI flag that sets it: {"n_keep", "--keep"}.
using flag_names = std::map<std::string, std::string>;

// The library refuses options in its field names (option_error, from a validate() or
// compute_context_sizes); a CLI says them in its flags: e.what() with each field of e.fields(),
// as a whole word, replaced by its flag in `flags` (a field not there stays as it is).
usage_error said_in_flags(const option_error & e, const flag_names & flags);

}  // namespace kvsim
