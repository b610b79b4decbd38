#include "report/occupancy.h"

#include "util/row_writer.h"

#include <algorithm>

namespace kvsim {

occupancy_recorder::occupancy_recorder(uint64_t every, const sim_clock & clock, const uint64_t * failures)
    : every_(std::max<uint64_t>(1, every)), clock_(clock), failures_(failures) {}

void occupancy_recorder::on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    uint32_t used = 0;
    for (uint32_t st = 0; st < c.get_n_stream(); ++st) used += c.cells(st).get_used();
    peaks_.used = std::max(peaks_.used, used);
    peaks_.n_kv = std::max(peaks_.n_kv, n_kv);
    ++peaks_.ubatches;
    if (n_++ % every_ == 0) {
        rows_.push_back(measure(c, sinfo, ub, n_kv));
    }
}

occupancy_row occupancy_recorder::measure(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const {
    occupancy_row r;
    r.ubatch = n_;
    r.step = clock_.step();
    r.sim_time = clock_.now();
    r.cache = c.name();
    r.tokens = ub.n_tokens;
    r.n_kv = n_kv;
    r.head = c.head(sinfo.strm.empty() ? 0 : sinfo.strm[0]);
    r.swa_reused = c.stats().swa_reused;
    r.slot_failures = failures_ ? *failures_ : 0;
    for (uint32_t st = 0; st < c.get_n_stream(); ++st) {
        const kv_cells & cells = c.cells(st);
        r.used += cells.get_used();
        const auto [runs, longest] = cells.free_runs();
        r.free_runs += runs;
        r.largest_free_run = std::max(r.largest_free_run, longest);
        r.shifted_cells += cells.n_shifted();
        const uint32_t n_ids = c.get_n_stream() == 1 ? c.n_seq_ids() : 1;
        for (uint32_t s = 0; s < n_ids; ++s) {
            const llama_seq_id sid = c.get_n_stream() == 1 ? (llama_seq_id) s : (llama_seq_id) st;
            r.active_seqs += cells.seq_pos_max(sid) >= 0;
        }
    }
    return r;
}

void occupancy_recorder::write_csv(std::ostream & out) const {
    out << "ubatch,step,sim_time_s,cache,tokens,used_cells,n_kv,head,free_runs,largest_free_run,active_seqs,"
           "swa_reused_cells,shifted_cells,slot_failures\n";
    row_writer w(out);
    for (const auto & r : rows_) {
        w.row(FMT_COMPILE("{},{},{:.6f},{},{},{},{},{},{},{},{},{},{},{}\n"), r.ubatch, r.step, r.sim_time, r.cache, r.tokens,
              r.used, r.n_kv, r.head, r.free_runs, r.largest_free_run, r.active_seqs, r.swa_reused, r.shifted_cells,
              r.slot_failures);
    }
}

}  // namespace kvsim
