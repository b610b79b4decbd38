// Time and bytes of the replay's kernels: one bandwidth_row per timed step (bandwidth.csv,
// report/bandwidth.h) and the totals the report and the step-time feedback read. Times are ns of
// one timed layer (the model's other layers are assumed to cost the same); bytes are one layer's
// compulsory traffic (kernels/bytes.h: ggml row sizes of the types). No upstream counterpart.
#pragma once

#include "attention.h"
#include "kv/kv_cache.h"
#include "report/bandwidth.h"

#include <cstdint>
#include <vector>

namespace kvsim {

// K+V bytes attention must read in a step (one layer): the cells below n_kv of each of the ubatch's streams
// held by one of its sequences. The kernel skips tiles masked for every token, so other sequences' cells in a
// shared stream are not read. k / v: the cache's layer tensors (types, head sizes).
uint64_t step_kv_bytes(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, const fa_desc & d,
                       const kv_tensor & k, const kv_tensor & v);

class kernel_account {
public:
    // Kernel wall time of any call (mask, attention of every layer, K-shift), counted for --time-budget.
    void add_spent(double ns) { spent_ns_ += ns; }
    double spent_ns() const { return spent_ns_; }

    // A K-shift happened in a cache (whether or not it ran: counted before the budget check).
    void count_shift_event() { ++shift_events_; }
    // A K-shift that ran: ns of all `layers` timed layers, bytes read+written of one layer (kshift_bytes).
    // It is charged to the next timed step's row (shift_ns, shift_bytes).
    void add_shift(double ns, size_t layers, uint64_t bytes, uint64_t hazards);

    // A timed step: r carries its identity, bytes and mask/attention times; this fills its shift columns from the
    // K-shifts since the last row, attn_gbs and frac_of_limit (of limit_read_gbs, GB/s; 0: unknown), and adds it.
    void add_step(bandwidth_row r, double limit_read_gbs, bool mask_updated);

    const std::vector<bandwidth_row> & rows() const { return rows_; }
    double attn_ns_total() const { return attn_ns_total_; }     // sum of the rows' attn_ns
    double kv_bytes_total() const { return kv_bytes_total_; }   // sum of the rows' kv_bytes
    uint64_t shift_events() const { return shift_events_; }
    uint64_t shift_hazards() const { return shift_hazards_; }
    uint64_t mask_updates() const { return mask_updates_; }     // timed steps whose mask was updated, not built

private:
    std::vector<bandwidth_row> rows_;
    double spent_ns_ = 0, attn_ns_total_ = 0, kv_bytes_total_ = 0;
    uint64_t shift_events_ = 0, shift_hazards_ = 0, mask_updates_ = 0;
    double pending_shift_ns_ = 0;
    uint64_t pending_shift_bytes_ = 0;
};

}  // namespace kvsim
