// `kvsim convert`: rewrite a request trace in another request format (docs/trace-formats.md).
#pragma once

#include "trace/request_trace.h"

#include <ostream>
#include <string>

namespace kvsim {

// Writes `t` in format `to` so that read_request_trace reads back the same requests (arrival_s
// to the target's resolution: Azure 100 ns, Mooncake and BurstGPT exact decimal doubles).
//   azure:    TIMESTAMP = 2023-01-01 00:00:00 + arrival_s (the source's wall-clock date is not
//             kept by the reader), 7 fractional digits.
//   mooncake: timestamp = arrival_s * 1000 (ms). hash_ids are the request's own; a request
//             without them (other formats) gets ceil(n_prompt / block_tokens) fresh ids never
//             used by another request (no shared prefix claimed).
//   burstgpt: Timestamp = arrival_s, Model "unknown", Total tokens = n_prompt + n_gen,
//             Log Type "Conversation log".
// Notes for the user (hash_ids dropped, ids invented) go to `warn`, one line each.
// Throws std::invalid_argument when block_tokens <= 0.
void write_request_trace(std::ostream & out, const request_trace & t, request_format to, std::ostream & warn,
                         int32_t block_tokens = 512);

// `kvsim convert IN OUT --to TO [--from FROM]`: reads the request trace IN (FROM = auto or a
// format name), writes it to OUT atomically (nothing appears on error). TO = azure | mooncake |
// burstgpt. Throws usage_error for TO = ops (the op stream depends on the server configuration:
// `kvsim replay IN --emit-ops OUT` with the -c/-np/... to simulate is the way), for an op trace
// as IN, for an OUT that is IN (by any name or link) and for an unknown format name; input_error for a bad IN; std::runtime_error when OUT
// cannot be written. Returns the number of requests written.
size_t convert_trace(const std::string & in, const std::string & out, const std::string & to, const std::string & from,
                     std::ostream & warn, int32_t block_tokens = 512);

// Proleptic Gregorian date of a day count since 1970-01-01 (inverse of days_from_civil).
// Algorithm: H. Hinnant, "chrono-Compatible Low-Level Date Algorithms", civil_from_days.
struct civil_date {
    int64_t y;
    unsigned m, d;
};
civil_date civil_from_days(int64_t days);

}  // namespace kvsim
