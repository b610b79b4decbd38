// Per-request results (requests.csv) and their latency statistics.
#pragma once

#include "sched/request_result.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

namespace kvsim {

// requests.csv: one row per request in trace order. Times in simulated seconds; queue_delay =
// admission - arrival; ttft = first_token - arrival; tpot = (finish - first_token) / (n_gen - 1)
// (empty when n_gen < 2 or the request failed); empty fields for events that did not happen.
// Columns only some runs have, at the end: speculative: draft_n and draft_n_accepted (the server's timings of
// speculative decoding); when a result is an extra completion (n_cmpl > 1): cmpl_of, the request it belongs to
// (empty for a request's own row).
void write_requests_csv(std::ostream & out, const std::vector<request_result> & rs, bool speculative = false);

// A request's time per output token: (finish - first_token) / (n_gen - 1); -1 when n_gen < 2, the
// request failed or never produced a token.
double request_tpot(const request_result & r);

// {"outcomes":{done,truncated,failed}, "ttft_s":{p50,p90,p99,mean}, "tpot_s":{...},
//  "queue_delay_s":{...}} over the requests that reached each event.
nlohmann::json latency_summary(const std::vector<request_result> & rs);

// Whether the simulated server kept up with the arrivals: {"offered_rps": requests over the span of
// their arrivals, "served_rps": requests finished (done or truncated) over the span from the first
// arrival to the last finish, "queue_max": the most requests waiting for a slot at once (arrived, not
// yet admitted), "backlog_at_last_arrival": requests arrived and not finished when the last one
// arrived, "overloaded": that backlog is over max(4 x n_slots, 5 % of the requests), i.e. the queue
// grew with the trace rather than draining between bursts}.
nlohmann::json load_summary(const std::vector<request_result> & rs, uint32_t n_slots);

}  // namespace kvsim
