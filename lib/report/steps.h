// steps.csv: one row per llama_decode call of a request-trace replay, in the order --emit-ops
// writes the decode groups (row `step` k is the k-th decode group of the emitted op trace), with
// the step-time model's predicted time, so that a run of the emitted trace on the real library
// can be joined row by row. Columns: docs/reports.md and docs/time-model.md.
#pragma once

#include "drive/op_runner.h"
#include "sched/step_time.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

struct step_row {
    uint64_t step = 0;          // 0-based index of the decode call (= decode group of the emitted op trace)
    std::string label;          // its batch label in the emitted trace (d<n>, or R<k>.<j> for a restore)
    bool restore = false;       // a RAM-cache restore's recorded decode: the server copies state, computes nothing
    int rc = 0;                 // llama_decode's return code (1: no slot, the server retries smaller)
    uint32_t n_tokens = 0;
    uint32_t n_seqs = 0;        // distinct sequences in the call
    uint64_t n_prompt = 0;      // prompt tokens among n_tokens (0 for a failed call)
    uint64_t n_gen = 0;         // generated tokens
    uint32_t n_ubatch = 0;      // ubatches the call was split into
    uint32_t n_kv = 0;          // largest n_kv (cells read per stream) of its ubatches, first cache
    double kv_visible = 0;      // sum over its ubatches of ubatch_visible_cells, first cache
    double t_start = 0;         // simulated seconds when the call started
    double predicted_s = 0;     // step-time model; 0 for a failed call and a restore
};

// Observer that records the rows (a decode observer and an op observer). prompt_tokens / gen_tokens point at the
// scheduler's running totals of decoded tokens, which it raises after each successful call:
// the difference at the next op (or finish) is that call's split.
class steps_recorder : public decode_observer, public op_observer {
public:
    steps_recorder(const step_time_model & tm, const context & ctx, const double * now, const uint64_t * prompt_tokens,
                   const uint64_t * gen_tokens);

    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override;
    void on_op(const op_group & g, int rc) override;   // op_observer (the op door, drive/op_runner.h)
    // Settles the last call's prompt/generated split; call once after the replay.
    void finish();

    const std::vector<step_row> & rows() const { return rows_; }
    void write_csv(std::ostream & out) const;

private:
    void settle();

    const step_time_model & tm_;
    ubatch_work_collector work_;
    const double * now_;
    const uint64_t *prompt_, *gen_;
    uint64_t prompt_seen_ = 0, gen_seen_ = 0;
    bool pending_ = false;
    std::vector<step_row> rows_;
};

}  // namespace kvsim
