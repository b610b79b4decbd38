// `kvsim plan`: every point of a grid of llama-server settings replayed over one workload
// (bookkeeping and the time model, no kernels), on all cores, then ranked. A point that does not fit
// the device's memory (llama.cpp's weights + K/V + compute buffer, plus the --fit margin) is
// listed, not replayed.
#pragma once

#include "kv/memory_breakdown.h"
#include "plan/plan_options.h"

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

// What one point's replay found (times in simulated seconds).
struct plan_metrics {
    uint64_t requests = 0, done = 0, truncated = 0, failed = 0, pending = 0;
    uint64_t slo_met = 0;          // done and within the objectives (plan_slo)
    double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0;   // over the requests that reached them
    double sim_seconds = 0;        // from the first arrival to the last finished step
    double gen_tokens_per_s = 0;   // generated tokens per simulated second
    double goodput_rps = 0;        // slo_met per simulated second
    uint64_t idle_slot_purges = 0;
    uint64_t ram_restores = 0;     // admissions that restored cells from the RAM prompt cache
    uint64_t prefix_tokens_reused = 0;
    // find_rate only: the highest rate scale (trace arrivals x scale) at which the point still meets
    // the objectives for slo_attainment of the requests, and that offered rate in requests per second;
    // 0: not searched, or not met even at 2^-20 of the trace's rate. rate_capped: met at 2^20 x.
    double max_rate_scale = 0, max_rate_rps = 0;
    bool rate_capped = false;
};

// plan.json's metric keys, one table for the writer (plan_report.cpp) and the reader (plan merge);
// rate_capped, the one flag, is written and read beside them.
inline constexpr std::pair<const char *, uint64_t plan_metrics::*> k_plan_metric_counts[] = {
    {"requests", &plan_metrics::requests},         {"done", &plan_metrics::done},
    {"truncated", &plan_metrics::truncated},       {"failed", &plan_metrics::failed},
    {"pending", &plan_metrics::pending},           {"slo_met", &plan_metrics::slo_met},
    {"idle_slot_purges", &plan_metrics::idle_slot_purges}, {"ram_restores", &plan_metrics::ram_restores},
    {"prefix_tokens_reused", &plan_metrics::prefix_tokens_reused}};
inline constexpr std::pair<const char *, double plan_metrics::*> k_plan_metric_reals[] = {
    {"goodput_rps", &plan_metrics::goodput_rps},   {"ttft_p50_s", &plan_metrics::ttft_p50},
    {"ttft_p99_s", &plan_metrics::ttft_p99},       {"tpot_p50_s", &plan_metrics::tpot_p50},
    {"tpot_p99_s", &plan_metrics::tpot_p99},       {"gen_tokens_per_s", &plan_metrics::gen_tokens_per_s},
    {"sim_seconds", &plan_metrics::sim_seconds},   {"max_rate_scale", &plan_metrics::max_rate_scale},
    {"max_rate_rps", &plan_metrics::max_rate_rps}};

enum class plan_status { ok, no_fit, refused, not_run };
const char * plan_status_name(plan_status s);

struct plan_point {
    size_t index = 0;              // in plan_options::points() order
    plan_config config;
    memory_breakdown memory;
    plan_status status = plan_status::not_run;
    std::string reason;            // no_fit / refused: why, in the library's words
    plan_metrics metrics;          // status ok only
    bool pareto = false;           // no other ok point has at least its goodput with a lower TTFT p99 and less device memory
    size_t rank = 0;               // 1 = best (ok points only; 0 otherwise)
};

struct plan_result {
    plan_header header;
    std::vector<plan_point> points;   // the shard's points in rank order: ok by rank, then no_fit, refused, not_run
    bool interrupted = false;         // stopped early: the points not run are not_run
    double wall_seconds = 0;          // terminal only: the outputs hold nothing that differs run to run
};

// Runs the plan: opt.validate(), then every point of opt.shard (memory first; a point that fits is replayed with
// run_replay_quiet). `progress(done, total)` after each point (from the calling thread's lock; may
// be empty). Stops starting points once `stop()` says so (interrupt). Throws what validate throws
// and input_error for a bad trace (checked once, before any point runs).
plan_result run_plan(const plan_options & opt, const std::function<void(size_t, size_t)> & progress,
                     const std::function<bool()> & stop);

// The metrics of one finished replay (exposed for tests): outcomes and percentiles from the
// replay's requests, goodput against `slo`.
plan_metrics plan_metrics_of(const std::vector<request_result> & requests, double sim_seconds, uint64_t gen_tokens,
                             const plan_slo & slo, uint64_t idle_purges, uint64_t ram_restores, uint64_t prefix_reused);

// Ranks the ok points (goodput descending, then TTFT p99, TPOT p99, device memory ascending, grid
// order) and marks the Pareto front over (goodput high, TTFT p99 low, device memory low).
void rank_plan_points(std::vector<plan_point> & pts);

// plan merge: shards' plan.json (plan_json) read back and joined into the unsharded plan, ranked
// again. Refuses (input_error naming the file in `names` and the field) a file that is not a plan,
// shards whose headers differ in anything but the shard, different shard counts, a missing or
// repeated shard, a point outside its shard or the grid, or a grid point no shard holds.
plan_result merge_plan_shards(const std::vector<nlohmann::json> & parts, const std::vector<std::string> & names);

}  // namespace kvsim
