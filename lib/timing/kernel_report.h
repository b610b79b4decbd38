// The report side of the replay's kernels: the "bandwidth" section of summary.json and the rows of
// the terminal summary (docs/output-formats.md), from the accounting (timing/kernel_account.h) and the
// sampling (timing/step_sampler.h). GB/s are 1e9 bytes/s; fractions are of the measured read limit.
#pragma once

#include "attention.h"
#include "bandwidth.h"
#include "timing/kernel_account.h"
#include "timing/step_sampler.h"
#include "timing/verify.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

// Everything the report reads; the pointers must be valid while the report is made.
struct kernel_report_input {
    const kernel_account * acct = nullptr;
    const step_sampler * sampler = nullptr;
    bandwidth_result limit;           // the memory limit attention is compared with
    bool limit_probed = false;        // the limit came from the caller's probe (limit_probe::measure), not the CPU's
    std::string limit_what;           // the probe's name (limit_probed only)
    backend_kind backend = backend_kind::cpu;
    int threads = 1;
    uint32_t layers = 1;              // timed layers
    attn_rot rot;
    const verify_stats * verify = nullptr;   // null: --verify off
    bool feeds_step_time = false;     // --step-time measured: these times replace the profile's attention term
};

// summary.json "bandwidth": limits, sampled/timed counts, GB/s overall and by tokens per stream, mask and
// K-shift counts, rotation, and (--verify) the verify stats.
nlohmann::json kernel_summary(const kernel_report_input & in);
// The terminal table's (name, value) rows: whose machine they measure, measured limit, attention, its split by
// tokens, K-shifts, verify.
std::vector<std::pair<std::string, std::string>> kernel_terminal_rows(const kernel_report_input & in);

}  // namespace kvsim
