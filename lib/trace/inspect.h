// `kvsim inspect`: statistics of a trace before replaying it (sizes, rates, length
// distributions, Mooncake prefix sharing; for op traces the op mix).
#pragma once

#include "trace/op_trace.h"
#include "trace/request_trace.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

namespace kvsim {

// Statistics of a request trace (all token counts in tokens, times in seconds):
//   {"kind":"request_trace", "format", "requests", "duration_s" (last arrival),
//    "arrival_rate": {"mean_per_s" (requests / duration, 0 when duration is 0),
//                     "peak_per_s" (most arrivals in one [k, k+1) s window)},
//    "prompt_tokens" / "gen_tokens": {"total","mean","min","p50","p90","p99","max"},
//    "length_histogram": [{"lo","hi","prompt","gen"}] (log2 buckets [lo, hi]: [0,0], [1,1], [2,3], [4,7], ...),
//    "prefix_sharing" (only when some request has hash_ids): {"block_tokens", "blocks",
//      "blocks_seen_before_fraction" (blocks whose id occurred in an earlier request),
//      "requests_with_shared_first_block", "longest_shared_prefix_blocks" (longest hash_ids
//      prefix equal to a prefix of an earlier request), "mean_shared_prefix_blocks",
//      "shareable_prompt_tokens" (sum over requests of min(n_prompt, shared prefix blocks * block_tokens))}}
// Percentiles are nearest-rank on the sorted values (index round(q * (n - 1))), as latency_summary.
nlohmann::json inspect_requests(const request_trace & t, int32_t block_tokens = 512);

// Statistics of an op trace: {"kind":"op_trace", "groups", "decode_calls", "decode_rows",
//   "tokens" (decode tokens), "max_tokens_per_decode", "shared_tokens" (tokens of rows with several
//   sequences), "ops": {"decode","rm","cp","keep","add","div","clear"} (groups per kind),
//   "sequences": {"count", "max_id", "ids"} (ids named by any op, -1 excluded)}.
nlohmann::json inspect_ops(const op_trace & t);

// Reads the trace at `path` (format "auto" = op trace when the header says so, else the
// request format detected from the first line; or one of ops|azure|mooncake|burstgpt) and
// returns inspect_ops / inspect_requests. Throws input_error for an unreadable or bad trace,
// std::invalid_argument for an unknown format name.
nlohmann::json inspect_trace(const std::string & path, const std::string & format = "auto", int32_t block_tokens = 512);

// Human-readable rendering of an inspect_* result (tables of the same numbers).
void print_inspect(std::ostream & out, const std::string & path, const nlohmann::json & j);

}  // namespace kvsim
