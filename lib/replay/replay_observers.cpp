#include "replay/replay_observers.h"

#include "report/html_report.h"
#include "util/nvtx.h"

namespace kvsim {

replay_observers::replay_observers(occupancy_recorder & occ, replay_hooks * hooks, cell_dumper * dump, const sim_clock & clock,
                                   bool want_report, bool want_timeline, uint64_t timeline_every)
    : cell_map(clock) {
    fan.add(&occ);
    ops.add(dump);
    if (want_report) fan.add(&cell_map);
    if (want_timeline) {
        timeline = std::make_unique<trace_event_recorder>(clock, timeline_every);
        fan.add(timeline.get());
        ops.add(timeline.get());
    }
    if (hooks) fan.add(hooks->observer());
}

void replay_observers::write(replay_outputs & out, const nlohmann::json & summary, const occupancy_recorder & occ,
                             const std::vector<request_result> * requests, replay_hooks * hooks) {
    KVSIM_NVTX_RANGE("report", (int64_t) occ.rows().size());
    const std::vector<bandwidth_row> * bw = hooks ? &hooks->rows() : nullptr;
    if (out.report) {
        double read_gbs = 0;
        if (summary.contains("bandwidth")) read_gbs = summary["bandwidth"]["measured_limit_gbs"].value("read", 0.0);
        write_html_report(out.report->out(), {summary, &occ.rows(), requests, bw, &cell_map, read_gbs});
    }
    if (out.timeline && timeline) timeline->write_json(out.timeline->out(), bw);
}

}  // namespace kvsim
