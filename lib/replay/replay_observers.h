// The observers of one `kvsim replay`, shared by both drivers (replay_driver.h), and the two
// outputs written from them once the summary is final: report.html and the --trace-json timeline.
#pragma once

#include "drive/op_runner.h"
#include "replay/replay_hooks.h"
#include "replay/replay_outputs.h"
#include "report/cell_map_sampler.h"
#include "report/dump_cells.h"
#include "report/occupancy.h"
#include "report/trace_events.h"
#include "sched/request_result.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace kvsim {

// Of the cache (fan), in order: occupancy, cell map (when --out), timeline (when --trace-json),
// then the kernel hooks. Of the op door (ops), in order: the cell dump (--dump-cells), then the
// timeline. A driver may add its own after these (the request driver: steps.csv). The clock and
// the recorders must outlive the replay.
struct replay_observers {
    observer_fanout fan;
    op_fanout ops;
    cell_map_sampler cell_map;
    std::unique_ptr<trace_event_recorder> timeline;   // null without --trace-json

    // clock: the replay's, as the cell map and the timeline stamp it; timeline_every: the timeline
    // keeps one llama_decode call in N.
    replay_observers(occupancy_recorder & occ, replay_hooks * hooks, cell_dumper * dump, const sim_clock & clock,
                     bool want_report, bool want_timeline, uint64_t timeline_every);

    // The op observers for the op door; null when there are none (the door then builds no op records).
    op_observer * op_observers() { return ops.empty() ? nullptr : &ops; }

    // Writes report.html (when out.report) and the timeline (when out.timeline), from the final
    // summary.json `summary`, the occupancy rows, `requests` (null for an op trace) and the kernel
    // hooks' bandwidth rows (hooks may be null). Writes into the open files; commits nothing.
    void write(replay_outputs & out, const nlohmann::json & summary, const occupancy_recorder & occ,
               const std::vector<request_result> * requests, replay_hooks * hooks);
};

}  // namespace kvsim
