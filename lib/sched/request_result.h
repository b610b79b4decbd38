// What happened to each request of a request-trace replay: the scheduler fills it, the reports
// read it (kept apart from the scheduler so that report/ does not include sched/server_sim.h).
#pragma once

#include <cstdint>
#include <string>

namespace kvsim {

// done: n_predict tokens generated; truncated: stopped at the slot's context (no shift), or
// completed after a context shift (the server reports both as truncated); failed: an error
// (prompt too long, context exceeded, invalid batch); pending: not finished (interrupted).
enum class request_outcome { done, truncated, failed, pending };
const char * request_outcome_name(request_outcome o);

// Per-request result; times in simulated seconds from the start of the replay.
struct request_result {
    long line = 0;
    int slot = -1;
    int32_t n_prompt = 0;
    int32_t n_gen_target = 0;
    int32_t n_gen = 0;            // tokens generated
    int32_t n_prefix_reused = 0;  // prompt tokens found in the cache (n_past)
    int32_t n_ram_restored = 0;   // cells restored from the host-RAM prompt cache at admission
    int32_t n_shifts = 0;         // context shifts of this request
    int32_t n_drafted = 0;        // speculative decoding: tokens the draft model proposed (timings.draft_n)
    int32_t n_draft_accepted = 0; // of them accepted by the target (timings.draft_n_accepted)
    long parent = -1;             // n_cmpl > 1: an extra completion of this request (its index in the trace); -1: a request
    double arrival = 0, admission = -1, first_token = -1, finish = -1;
    request_outcome outcome = request_outcome::pending;
    std::string error;
};

}  // namespace kvsim
