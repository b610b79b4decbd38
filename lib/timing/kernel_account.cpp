#include "timing/kernel_account.h"

#include "bytes.h"

namespace kvsim {

uint64_t step_kv_bytes(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, const fa_desc & d,
                       const kv_tensor & k, const kv_tensor & v) {
    uint64_t owned = 0;
    for (int64_t st = 0; st < d.n_stream; ++st) {
        seq_set mine;
        for (int64_t ii = 0; ii < d.n_tps; ++ii) {
            for (llama_seq_id q : ub.seq_id[(size_t) (st * d.n_tps + ii)]) mine.set(q);
        }
        const kv_cells & cells = c.cells(sinfo.strm[st]);
        for (uint32_t j = 0; j < (uint32_t) d.n_kv; ++j) owned += (cells.seq_get_all(j) & mine).any();
    }
    return owned * fa_kv_bytes(1, 1, d.n_head_kv, k.type, d.head_dim_k, v.type, d.head_dim_v);
}

void kernel_account::add_shift(double ns, size_t layers, uint64_t bytes, uint64_t hazards) {
    shift_hazards_ += hazards;
    spent_ns_ += ns;
    pending_shift_ns_ += ns / (double) layers;
    pending_shift_bytes_ += bytes;
}

void kernel_account::add_step(bandwidth_row r, double limit_read_gbs, bool mask_updated) {
    mask_updates_ += mask_updated ? 1 : 0;
    r.shift_bytes = pending_shift_bytes_;
    r.shift_ns = pending_shift_ns_;
    r.attn_gbs = r.attn_ns > 0 ? (double) r.kv_bytes / r.attn_ns : 0;
    r.frac_of_limit = limit_read_gbs > 0 ? r.attn_gbs / limit_read_gbs : 0;
    rows_.push_back(r);
    pending_shift_ns_ = 0;
    pending_shift_bytes_ = 0;
    attn_ns_total_ += r.attn_ns;
    kv_bytes_total_ += (double) r.kv_bytes;
}

}  // namespace kvsim
