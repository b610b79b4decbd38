#include "timing/kv_buffers.h"

#include <algorithm>
#include <stdexcept>

namespace kvsim {

void kv_buffers::add(const kv_cache & c) {
    cache_buffers b;
    b.cache = &c;
    std::vector<uint8_t> host;
    for (uint32_t l = 0; l < layout_.layers; ++l) {
        for (int which = 0; which < 2; ++which) {
            kv_tensor t;
            t.type = which == 0 ? layout_.type_k : layout_.type_v;
            t.head_dim = layout_.head_dim;
            t.n_head_kv = layout_.n_head_kv;
            t.kv_size = c.get_size();
            t.n_stream = c.get_n_stream();
            // deterministic content everywhere, so timing reads real values (never NaN)
            host.resize(t.total_bytes());
            kv_tensor staging = t;
            staging.data = host.data();
            const int rot_n = which == 0 ? rot_.n_k : rot_.n_v;
            for (int64_t s = 0; s < t.n_stream; ++s) {
                for (int64_t cell = 0; cell < t.kv_size; ++cell) {
                    write_kv_cell(staging, s, cell, l, which == 0 ? kv_which::k : kv_which::v, 0, (llama_pos) cell, rot_n);
                }
            }
            b.mem.push_back(be_.alloc(t.total_bytes()));
            t.data = b.mem.back().get();
            be_.upload(t.data, host.data(), t.total_bytes());
            (which == 0 ? b.k : b.v).push_back(t);
        }
    }
    if (shadow_) b.shadow = std::make_unique<cell_shadow>(c.get_size(), c.get_n_stream());
    bufs_.push_back(std::move(b));
}

cache_buffers & kv_buffers::of(const kv_cache & c) {
    for (auto & b : bufs_) {
        if (b.cache == &c) return b;
    }
    throw std::logic_error("kernel hooks: unknown cache " + c.name());
}

// One cell's row written through host staging (the tensor may live on the device).
void kv_buffers::write_row(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which,
                           llama_seq_id seq, llama_pos pos, int rot_n) {
    kv_tensor one = t;
    row_staging_.resize(t.row_bytes());
    one.data = row_staging_.data();
    one.kv_size = 1;
    one.n_stream = 1;
    write_kv_cell(one, 0, 0, layer, which, seq, pos, rot_n);
    be_.upload(t.row(stream, cell), row_staging_.data(), t.row_bytes());
}

void kv_buffers::write_placed(cache_buffers & b, const slot_info & sinfo, const ubatch & ub) {
    if (!shadow_) return;
    const uint32_t per = sinfo.size();
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        for (uint32_t ii = 0; ii < per; ++ii) {
            const uint32_t i = s * per + ii;
            const uint32_t cell = sinfo.idxs[s][ii];
            const llama_seq_id seq = ub.seq_id[i][0];
            for (size_t l = 0; l < b.k.size(); ++l) {
                write_row(b.k[l], sinfo.strm[s], cell, (uint32_t) l, kv_which::k, seq, ub.pos[i], rot_.n_k);
                write_row(b.v[l], sinfo.strm[s], cell, (uint32_t) l, kv_which::v, seq, ub.pos[i], rot_.n_v);
            }
            b.shadow->place(sinfo.strm[s], cell, seq, ub.pos[i]);
        }
    }
}

void kv_buffers::copy_streams(cache_buffers & b) {
    for (const auto & [src, dst] : b.cache->pending_copies()) {
        for (auto * ts : {&b.k, &b.v}) {
            for (const kv_tensor & t : *ts) be_.copy(t.row(dst, 0), t.row(src, 0), t.stream_bytes());
        }
    }
    if (shadow_) b.shadow->apply_copies(b.cache->pending_copies());
}

std::vector<int32_t> shift_array(const kv_cache & c) {
    std::vector<int32_t> shift((size_t) c.get_size() * c.get_n_stream());
    for (uint32_t s = 0; s < c.get_n_stream(); ++s) {
        const auto & sh = c.cells(s).shift();
        std::copy(sh.begin(), sh.end(), shift.begin() + (size_t) s * c.get_size());
    }
    return shift;
}

}  // namespace kvsim
