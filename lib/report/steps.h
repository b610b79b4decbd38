// steps.csv: one row per llama_decode call of a request-trace replay, in the order --emit-ops
// writes the decode groups (row `step` k is the k-th decode group of the emitted op trace), with
// the step timer's record of the call (time/step_timer.h: its kind, work and predicted time), so
// that a run of the emitted trace on the real library can be joined row by row. Columns:
// docs/reports.md and docs/time-model.md.
#pragma once

#include "drive/op_runner.h"
#include "time/step_timer.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

struct step_row {
    uint64_t step = 0;          // 0-based index of the decode call (= decode group of the emitted op trace)
    std::string label;          // its batch label in the emitted trace (d<n>, or R<k>.<j> for a restore)
    int rc = 0;                 // llama_decode's return code (1: no slot, the server retries smaller)
    uint32_t n_tokens = 0;
    uint32_t n_seqs = 0;        // distinct sequences in the call
    step_record time;           // the step timer's record of the call (a restore's for each of its recorded calls)
};

// Records the rows: an op observer of the door (each decode group: label, tokens, sequences, rc)
// and a step observer of the scheduler's step timer (each call's record). The door reports a call
// before the timer does; a record settles the decode groups reported since the previous record
// (one for a decode; a restore's recorded calls, or none when the restore has no op-trace form).
class steps_recorder : public op_observer, public step_observer {
public:
    void on_op(const op_group & g, int rc) override;
    void on_step(const step_record & r) override;

    const std::vector<step_row> & rows() const { return rows_; }
    void write_csv(std::ostream & out) const;

private:
    std::vector<llama_seq_id> seqs_;   // the running call's sequences (kept: no allocation per call)
    std::vector<step_row> rows_;
    size_t settled_ = 0;   // rows before this index have their record
};

}  // namespace kvsim
