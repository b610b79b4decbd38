// kvbench results: per-point timings and the measured bandwidth limit of a run, the machine it ran on, and the
// tables that name their kvbench.json keys. Their JSON form: bench/bench_json.h; the merge of shard outputs:
// bench/bench_merge.h; the machine's description: bench/machine_probe.h.
#pragma once

#include "bench/sweep_spec.h"

#include <array>
#include <string>
#include <vector>

namespace kvsim {

// Wall-clock statistics of n timed calls, ns. n == 0: not measured.
struct time_stats {
    double min_ns = 0.0;
    double median_ns = 0.0;
    double max_ns = 0.0;
    int n = 0;
};
// Statistics of per-call times in ns (util/timing_loop.h); empty samples give n == 0.
time_stats time_stats_of(std::vector<double> ns);

// The kvbench.json keys of a time_stats' fields (one table for the writer, the reader and merge's checks).
struct time_stats_key {
    const char * key;
    double time_stats::*member;
};
inline constexpr std::array<time_stats_key, 3> time_stats_keys = {
    {{"min_ns", &time_stats::min_ns}, {"median_ns", &time_stats::median_ns}, {"max_ns", &time_stats::max_ns}}};
inline constexpr const char * time_stats_n_key = "n";

// What became of a point: measured; skipped (note says why); failed (the kernel's output differed from the
// reference or Eigen by more than the backend's tolerance: no timing of it is kept, note says by how much).
enum class point_status { ok, skipped, failed };
// "ok", "skipped", "failed": the form in kvbench.json, kvbench.csv and the table.
const char * to_string(point_status s);
// The inverse of to_string; throws std::invalid_argument quoting s and the three choices for anything else.
point_status parse_point_status(const std::string & s);

// One point of a sweep; a skipped baseline leaves its stats at n == 0 with the reason in note.
struct point_result {
    sweep_point point;
    point_status status = point_status::ok;
    std::string note;
    size_t kv_bytes = 0;        // K+V bytes one flash-attention call reads (kernels/bytes.h fa_kv_bytes)
    size_t mask_bytes = 0;      // bytes of the f16 KQ mask written by a full build
    size_t kshift_bytes = 0;    // bytes moved by one K-shift (kernels/bytes.h kshift_bytes)
    int copies = 1;             // K/V copies rotated between calls (so >= rotate_bytes cycle through the LLC)
    double limit_read_gbs = 0;  // measured read bandwidth of the run this point came from, GB/s
    time_stats fa, mask_full, mask_update, kshift, eigen, ref;
    // the probe read right after each timed call (CPU backend): median of those passes' GB/s, and median over the
    // calls of (call's GB/s / its pass's GB/s); 0 = not measured (CUDA, or a run written before these existed)
    double adj_read_gbs = 0;
    double adj_frac = 0;
    // compute roof (CPU backend), measured right after each timed call's probe pass: the GB/s one thread reaches
    // on this point's type and head shape with K/V resident in its L2 (the cells from 64 to roof_ctx of one
    // sequence: bytes over the difference of the two call times, so per-call work cancels), times the thread
    // count: the rate the kernel could reach on a long context if memory cost nothing. roof_gbs = median over the
    // timed calls; roof_frac = median over the calls of roof GB/s / that call's probe pass GB/s (< 1: the point is
    // compute-bound here and %adj cannot reach 100). 0 = not measured (CUDA, or a run written before they existed)
    double roof_gbs = 0;
    double roof_frac = 0;
    int64_t roof_ctx = 0;
    double err_vs_eigen = -1;   // max abs difference of the outputs, -1 = not compared
    double err_vs_ref = -1;
    // the first (warm-up) call's output vs the naive reference on stream 0, checked before anything is timed
    // (status failed when above the backend's tolerance or NaN; -1 = not checked, a run written before it existed)
    double err_check = -1;

    // Derived from the median time: GB/s = kv_bytes / median_ns; fraction of limit_read_gbs;
    // tokens/s = batch / median seconds (one layer's attention only); baseline time / kernel time (0 = none).
    double gbs() const;
    double gbs_best() const;  // from the min time
    double frac_limit() const;
    double tokens_per_s() const;
    double eigen_ratio() const;
    double ref_ratio() const;
};

// The timed kernels of a point and their kvbench.json keys (one table for the writer, the reader and merge's checks).
struct point_timing_key {
    const char * key;
    time_stats point_result::*member;
};
inline constexpr std::array<point_timing_key, 6> point_timing_keys = {{{"flash_attn", &point_result::fa},
                                                                       {"mask_full", &point_result::mask_full},
                                                                       {"mask_update", &point_result::mask_update},
                                                                       {"k_shift", &point_result::kshift},
                                                                       {"eigen", &point_result::eigen},
                                                                       {"reference", &point_result::ref}}};

// Where and how a run happened (written into kvbench.json).
struct machine_info {
    std::string cpu_model;
    int cores = 0;
    std::string gpu;         // "" = none found
    std::string build_type;
    std::string git_commit;
    std::string date;        // ISO 8601, UTC
    std::string host;
    std::string kernel_path;  // the CPU kernels' instruction set and loops (cpu_backend::path_name), "" = unknown
};

// The measured limit of one run (kernels/bandwidth.h), GB/s.
struct run_limit {
    int shard = 0;
    std::string host;
    double read_gbs = 0;
    double copy_gbs = 0;
    // CPU probe only, with more than one thread: the same read probe on one thread. read_gbs close to
    // threads x this means the probe is bound by each core's own miss handling, not by the memory system
    // (probe_core_bound). 0 = not measured (CUDA, one thread, or a run written before it existed)
    double read_gbs_one_thread = 0;
};
// True when the run's read probe scaled with its threads (read_gbs >= 0.75 x threads x read_gbs_one_thread): the
// cores, not DRAM, set the limit, so a kernel that also computes on those cores cannot reach it.
bool probe_core_bound(const run_limit & l, int threads);

struct sweep_output {
    sweep_config config;
    machine_info machine;
    std::vector<run_limit> limits;  // one per shard run (one for an unsharded run)
    std::vector<point_result> results;
    std::vector<std::string> notes;
    bool interrupted = false;
};

}  // namespace kvsim
