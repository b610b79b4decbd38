#include "report/steps.h"

#include "trace/op_trace.h"
#include "util/row_writer.h"

#include <algorithm>

namespace kvsim {

void steps_recorder::on_op(const op_group & g, int rc) {
    if (g.op != op_kind::decode) return;
    step_row r;
    r.step = rows_.size();
    r.label = g.rows.empty() ? std::string() : g.rows.front().batch;
    r.rc = rc;
    seqs_.clear();
    for (const auto & row : g.rows) {
        r.n_tokens += (uint32_t) row.n_tokens;
        seqs_.insert(seqs_.end(), row.seqs.begin(), row.seqs.end());
    }
    std::sort(seqs_.begin(), seqs_.end());
    r.n_seqs = (uint32_t) (std::unique(seqs_.begin(), seqs_.end()) - seqs_.begin());
    rows_.push_back(std::move(r));
}

void steps_recorder::on_step(const step_record & rec) {
    for (; settled_ < rows_.size(); ++settled_) rows_[settled_].time = rec;
}

void steps_recorder::write_csv(std::ostream & out) const {
    out << "step,label,kind,rc,n_tokens,n_seqs,n_prompt_tokens,n_gen_tokens,n_ubatch,n_kv,t_start_s,predicted_ms,kv_visible\n";
    row_writer w(out);
    for (const auto & r : rows_) {
        const step_record & t = r.time;
        w.row(FMT_COMPILE("{},{},{},{},{},{},{},{},{},{},{:.9f},{:.6f},{:.0f}\n"), r.step, r.label, step_kind_name(t.kind), r.rc,
              r.n_tokens, r.n_seqs, t.n_prompt, t.n_gen, t.n_ubatch, t.n_kv, t.t_start, t.predicted_s * 1e3, t.kv_visible);
    }
}

}  // namespace kvsim
