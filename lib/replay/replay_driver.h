// What the two kinds of trace supply to the one replay skeleton (run_replay.cpp): an op trace
// goes through the op door op for op (replay_op_driver.cpp), a request trace through the
// llama-server simulation (replay_request_driver.cpp). Everything else (paths, outputs, context,
// observers, kernel hooks, summary.json's shared fields, report.html, timeline, commit, the
// terminal table) is the skeleton's.
#pragma once

#include "kv/context.h"
#include "kv/memory_breakdown.h"
#include "replay/replay_observers.h"
#include "replay/replay_options.h"
#include "replay/replay_outputs.h"
#include "replay/run_replay.h"
#include "report/occupancy.h"
#include "sched/request_result.h"
#include "time/sim_clock.h"
#include "time/step_timer.h"
#include "util/progress.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

using terminal_rows = std::vector<std::pair<std::string, std::string>>;   // (name, value), in order

// The replay's clock and how the shared observers sample it (replay_driver::attach). The clock and
// the pointers stay valid until the driver is destroyed.
struct replay_clock {
    const sim_clock & clock;                  // the scheduler's (a request trace), or op groups done and no time (an op trace)
    attention_feedback * feedback = nullptr;  // where measured kernel times refine the step time; null: no step time
    const uint64_t * no_slot = nullptr;       // occupancy.csv's count of decode calls without a slot; null: none
    uint64_t occupancy_every = 1;             // an occupancy.csv row every N ubatches
    uint64_t timeline_every = 1;              // the timeline keeps one llama_decode call in N
};

// What a driver hands the skeleton after the run (replay_driver::report).
struct replay_report {
    nlohmann::json summary;   // summary.json's own fields (kind, totals, ...); the skeleton adds tool,
                              // config, peaks, wall_seconds and the kernel hooks' bandwidth
    terminal_rows rows;       // the terminal table before the kernel hooks' rows
    std::string interrupted;  // the INTERRUPTED row after them; "" = the trace ran to the end
    std::string wall;         // the "wall time" row, last
    std::string title;        // the terminal table's first line
    const std::vector<request_result> * requests = nullptr;   // report.html's request section; null: none
};

// The skeleton calls, in order: attach, observe, drive, report, write; once each. The driver is
// built from the options and reads its trace (errors: input_error naming the trace's file and
// line, usage_error for an option that does not apply), before the context exists.
class replay_driver {
public:
    virtual ~replay_driver() = default;

    // true: requests.csv, steps.csv and --emit-ops are written (a request trace's only).
    virtual bool is_request_trace() const = 0;
    // Builds what runs the trace on `ctx` (it outlives drive() and report(); nothing of the driver
    // uses it afterwards); returns the clock the observers read.
    virtual replay_clock attach(context & ctx) = 0;
    // Adds the driver's own observers after the shared ones and wires them to what runs the trace.
    virtual void observe(replay_observers & obs, replay_outputs & out) = 0;
    // Runs the whole trace (until interrupted()), calling bar.update(done, total) as it goes.
    virtual void drive(replay_observers & obs, progress_bar & bar) = 0;
    // The summary, the terminal rows and the title, once the run is over (wall: seconds it took).
    virtual replay_report report(const context & ctx, const occupancy_recorder & occ, double wall) = 0;
    // Writes the driver's own outputs into the open files (--emit-ops, requests.csv, steps.csv).
    virtual void write(replay_outputs & out) = 0;
};

// The drivers (replay_op_driver.cpp, replay_request_driver.cpp); each reads opt.trace (opt must
// outlive the driver). Throws input_error naming the trace's file and line (a bad trace),
// usage_error for an op trace given request-trace options (opt.request_only_given), and
// std::invalid_argument (parse_request_format) for an unknown request format.
std::unique_ptr<replay_driver> make_op_driver(const replay_options & opt);
std::unique_ptr<replay_driver> make_request_driver(const replay_options & opt);

// Shared by both drivers' terminal tables: "n_ctx N, n_ctx_seq N, N seq(s), N stream(s), n_batch N,
// n_ubatch N[, SWA cache N cells]".
std::string context_line(const context & ctx);


}  // namespace kvsim
