#include "timing/mask_tracker.h"

namespace kvsim {

namespace {
bool same_desc(const kq_mask_desc & a, const kq_mask_desc & b) {
    return a.n_kv == b.n_kv && a.n_tps == b.n_tps && a.n_stream == b.n_stream && a.causal == b.causal && a.n_swa == b.n_swa &&
           a.swa == b.swa && a.alibi == b.alibi && a.type == b.type;
}
}  // namespace

bool mask_tracker::plan(const kq_mask_desc & d, const std::vector<uint32_t> & strm, const kq_mask_stream * streams) {
    if (!valid_ || !same_desc(d, d_) || strm != strm_) return false;
    for (int64_t s = 0; s < d.n_stream; ++s) {
        auto & cells = changes_[(size_t) s].cells;
        cells.clear();
        const auto & pos = pos_[(size_t) s];
        const auto & seq = seq_[(size_t) s];
        for (uint32_t j = 0; j < (uint32_t) d.n_kv; ++j) {
            if (streams[s].cell_pos[j] != pos[j] || streams[s].cell_seq[j] != seq[j]) cells.push_back(j);
        }
    }
    return true;
}

void mask_tracker::remember(const kq_mask_desc & d, const std::vector<uint32_t> & strm, const kq_mask_stream * streams) {
    d_ = d;
    strm_ = strm;
    const auto n = (size_t) d.n_stream, n_kv = (size_t) d.n_kv, n_tps = (size_t) d.n_tps;
    pos_.resize(n);
    seq_.resize(n);
    changes_.resize(n);
    for (size_t s = 0; s < n; ++s) {
        pos_[s].assign(streams[s].cell_pos, streams[s].cell_pos + n_kv);
        seq_[s].assign(streams[s].cell_seq, streams[s].cell_seq + n_kv);
        changes_[s].prev_tok_pos.assign(streams[s].tok_pos, streams[s].tok_pos + n_tps);
        changes_[s].prev_tok_seq.assign(streams[s].tok_seq, streams[s].tok_seq + n_tps);
    }
    valid_ = true;
}

}  // namespace kvsim
