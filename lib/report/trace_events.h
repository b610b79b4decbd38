// A replay as a Chrome trace-event / Perfetto JSON timeline (--trace-json): one track per
// sequence (prefill / decode slices, evictions and shifts), one for llama_decode calls, one for
// the allocator (apply_ubatch per ubatch and cache, find_slot failures), one for the measured
// kernels, and counters for used cells and n_kv. Format: "Trace Event Format" (Google,
// docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): X = complete slice
// (ts, dur), i = instant (s = "t"), C = counter, M = track names. Times in microseconds.
#pragma once

#include "drive/op_runner.h"
#include "kv/context.h"
#include "report/bandwidth.h"
#include "time/sim_clock.h"
#include "trace/op_trace.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

// Track ids (tid) of the timeline, all in pid 1.
enum trace_track : int { TRACK_STEPS = 1, TRACK_ALLOCATOR = 2, TRACK_KERNELS = 3, TRACK_SEQ0 = 100 };

struct trace_event {
    char ph = 'X';          // X, i, C
    std::string name;
    int tid = TRACK_STEPS;
    double ts_us = 0;
    double dur_us = 0;      // X only
    nlohmann::json args = nlohmann::json::object();
};

// Observer building the timeline from the op stream (on_op, an op observer of the op door) and the
// cache's placements (on_apply, a decode observer).
// Time: the clock's simulated seconds, read at each event; on a clock without time (op traces) op
// k of the replay is at k microseconds and every op lasts 1 us.
// A llama_decode call starts at the time of its on_op and lasts until the next op or
// step_done(), whichever comes first; failed calls (rc != 0) last 0 and add an instant.
// Per-sequence slices are exact and merged while back to back ("decode" = 1 token of the
// sequence in the call, "prefill" = more); the steps/allocator slices and the counters are kept
// for one llama_decode call in `every` (>= 1) so that a long replay stays loadable.
class trace_event_recorder : public decode_observer, public op_observer {
public:
    explicit trace_event_recorder(const sim_clock & clock, uint64_t every = 1);

    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override;
    void on_op(const op_group & g, int rc) override;
    // The scheduler finished a step and advanced its clock: ends the open llama_decode call at
    // the clock's time. Without it a call ends at the next op (which overstates it across idle gaps).
    void step_done();

    // Events so far (the open call excluded), per track in time order.
    const std::vector<trace_event> & events() const { return events_; }

    // {"traceEvents":[...], "displayTimeUnit":"ms", "otherData":{...}}: the events, the measured
    // kernel slices of `bandwidth` (may be null; rows in time order; "K-shift", "mask build",
    // "attention" back to back from the row's sim_time, per-layer times, pushed later when they
    // would overlap the previous row's), and M events naming every track. Ends the open call.
    void write_json(std::ostream & out, const std::vector<bandwidth_row> * bandwidth);

private:
    struct ubatch_rec {
        std::string cache;
        uint32_t n_tokens, n_kv, head, used;
    };
    struct open_call {
        bool open = false;
        double start = 0;
        uint64_t index = 0;
        uint32_t n_tokens = 0;
        std::vector<std::pair<llama_seq_id, uint32_t>> seq_tokens;
        std::vector<ubatch_rec> ubatches;
    };

    double now() const;
    void close_call(double end);
    void seq_slice(llama_seq_id s, const char * name, double start, double dur, uint32_t tokens);
    void instant(int tid, const std::string & name, double ts, nlohmann::json args);
    void seq_op(const op_group & g, double t);
    int seq_track(llama_seq_id s);

    const sim_clock & clock_;
    uint64_t every_;
    uint64_t n_ops_ = 0, n_calls_ = 0;
    std::vector<ubatch_rec> placed_;   // ubatches of the call in flight (on_apply precedes on_op)
    open_call call_;
    std::vector<trace_event> events_;
    std::vector<int64_t> last_on_track_;   // per seq: index in events_ of its last event, -1 = none
};

}  // namespace kvsim
