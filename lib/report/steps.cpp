#include "report/steps.h"

#include "trace/op_trace.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

namespace kvsim {

steps_recorder::steps_recorder(const step_time_model & tm, const context & ctx, const double * now, const uint64_t * prompt_tokens,
                               const uint64_t * gen_tokens)
    : tm_(tm), work_(ctx), now_(now), prompt_(prompt_tokens), gen_(gen_tokens) {}

void steps_recorder::on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    work_.on_apply(c, sinfo, ub, n_kv);
}

void steps_recorder::settle() {
    if (pending_ && !rows_.empty()) {
        rows_.back().n_prompt = *prompt_ - prompt_seen_;
        rows_.back().n_gen = *gen_ - gen_seen_;
    }
    prompt_seen_ = *prompt_;
    gen_seen_ = *gen_;
    pending_ = false;
}

void steps_recorder::on_op(const op_group & g, int rc) {
    settle();
    if (g.op != op_kind::decode) return;
    step_row r;
    r.step = rows_.size();
    r.label = g.rows.empty() ? std::string() : g.rows.front().batch;
    // the scheduler's own calls are labelled d<n>; op_runner::restore's recorded calls <label>.<k>
    r.restore = work_.work.empty() && r.label.find('.') != std::string::npos;
    r.rc = rc;
    std::set<llama_seq_id> seqs;
    for (const auto & row : g.rows) {
        r.n_tokens += (uint32_t) row.n_tokens;
        seqs.insert(row.seqs.begin(), row.seqs.end());
    }
    r.n_seqs = (uint32_t) seqs.size();
    r.n_ubatch = (uint32_t) work_.work.size();
    for (const auto & ub : work_.work) {
        if (!ub.empty()) r.n_kv = std::max(r.n_kv, ub.front().n_kv);
        if (!ub.empty()) r.kv_visible += ub.front().visible;
    }
    r.t_start = now_ ? *now_ : 0;
    r.predicted_s = rc == 0 && !r.restore ? tm_.seconds(work_.work) : 0;
    work_.work.clear();
    rows_.push_back(std::move(r));
    pending_ = true;
}

void steps_recorder::finish() { settle(); }

void steps_recorder::write_csv(std::ostream & out) const {
    out << "step,label,kind,rc,n_tokens,n_seqs,n_prompt_tokens,n_gen_tokens,n_ubatch,n_kv,t_start_s,predicted_ms,kv_visible\n";
    for (const auto & r : rows_) {
        out << fmt::format("{},{},{},{},{},{},{},{},{},{},{:.9f},{:.6f},{:.0f}\n", r.step, r.label, r.restore ? "restore" : "decode", r.rc,
                           r.n_tokens, r.n_seqs, r.n_prompt, r.n_gen, r.n_ubatch, r.n_kv, r.t_start, r.predicted_s * 1e3, r.kv_visible);
    }
}

}  // namespace kvsim
