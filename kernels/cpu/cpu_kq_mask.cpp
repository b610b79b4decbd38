// KQ mask on the CPU, full and incremental (llama-kv-cache.cpp: set_input_kq_mask_impl).
#include <algorithm>
#include <climits>
#include <cmath>

#include "cpu/cpu_backend.h"
#include "fp16.h"

namespace kvsim {

namespace {

// The part of the rule that depends on the token position: causal and SWA.
inline bool pos_visible(const kq_mask_desc & d, llama_pos p0, llama_pos p1) {
    if (d.causal && p0 > p1) return false;
    return !is_masked_swa(d.n_swa, d.swa, p0, p1);
}

inline float cell_value(const kq_mask_desc & d, const kq_mask_stream & st, int64_t j, llama_pos p1, llama_seq_id seq) {
    const llama_pos p0 = st.cell_pos[j];
    if (p0 < 0 || !st.cell_seq[j].test((size_t) seq) || !pos_visible(d, p0, p1)) return -INFINITY;
    return d.alibi ? (float) -std::abs(p0 - p1) : 0.0f;
}

inline void store(const kq_mask_desc & d, void * dst, size_t idx, float v) {
    if (d.type == ggml_type::f16) {
        static_cast<fp16_t *>(dst)[idx] = fp32_to_fp16(v);
    } else {
        static_cast<float *>(dst)[idx] = v;
    }
}

// Positions p0 >= 0 visible from a token at p1 form one interval [lo, hi] for every rule here (causal bounds it
// above; standard/chunked/symmetric SWA below, symmetric also above); see is_masked_swa in core/types.h.
struct pos_interval {
    int32_t lo, hi;
    bool has(int32_t p0) const { return p0 >= lo && p0 <= hi; }
};

pos_interval visible_interval(const kq_mask_desc & d, llama_pos p1) {
    int64_t lo = 0, hi = d.causal ? (int64_t) p1 : INT32_MAX;
    const int64_t n = d.n_swa;
    switch (d.swa) {
        case swa_type::none: break;
        case swa_type::standard: lo = std::max<int64_t>(lo, (int64_t) p1 - n + 1); break;
        case swa_type::chunked: lo = std::max<int64_t>(lo, (int64_t) ((p1 / (int32_t) n) * (int32_t) n)); break;
        case swa_type::symmetric:
            lo = std::max<int64_t>(lo, (int64_t) p1 - n / 2);
            hi = std::min<int64_t>(hi, (int64_t) p1 + n / 2);
            break;
    }
    const auto clamp = [](int64_t x) { return (int32_t) std::clamp<int64_t>(x, INT32_MIN, INT32_MAX); };
    return {clamp(lo), clamp(hi)};
}

// Rewrite the cells of one row whose visibility differs between token positions p1_old and p1 (same seq).
// A branch-free pass over 64 cells at a time (vectorised by the compiler) finds the blocks holding such a cell:
// a decode step moves p1 by one, so nearly every block is skipped after reading 256 bytes of cell_pos.
void update_moved_row(const kq_mask_desc & d, const kq_mask_stream & st, size_t base, llama_pos p1, llama_pos p1_old,
                      llama_seq_id seq, void * dst) {
    const pos_interval a = visible_interval(d, p1), b = visible_interval(d, p1_old);
    const llama_pos * pos = st.cell_pos;
    for (int64_t j0 = 0; j0 < d.n_kv; j0 += 64) {
        const int64_t j1 = std::min<int64_t>(d.n_kv, j0 + 64);
        int hit = 0;
        for (int64_t j = j0; j < j1; ++j) {
            const int32_t p0 = pos[j];
            hit |= (p0 >= 0) & (((p0 >= a.lo) & (p0 <= a.hi)) ^ ((p0 >= b.lo) & (p0 <= b.hi)));
        }
        if (!hit) continue;
        for (int64_t j = j0; j < j1; ++j) {
            if (pos[j] >= 0 && a.has(pos[j]) != b.has(pos[j])) store(d, dst, base + (size_t) j, cell_value(d, st, j, p1, seq));
        }
    }
}

void build_row(const kq_mask_desc & d, const kq_mask_stream & st, int64_t s, int64_t i, void * dst) {
    const size_t base = (size_t) ((s * d.n_tps + i) * d.n_kv);
    for (int64_t j = 0; j < d.n_kv; ++j) store(d, dst, base + (size_t) j, cell_value(d, st, j, st.tok_pos[i], st.tok_seq[i]));
}

}  // namespace

void cpu_backend::build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) {
    check_kq_mask_desc(d, streams);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        for (int64_t i = 0; i < d.n_tps; ++i) build_row(d, streams[s], s, i, dst);
    }
}

// A row keeps its values unless its token's seq changed, ALiBi is on (every value depends on p1), the cell's
// metadata changed, or the cell's causal/SWA decision differs between the old and new token position. The last
// test reads only cell_pos (4 bytes/cell) instead of the 32-byte seq set and the mask store (update_moved_row).
void cpu_backend::update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes,
                                 void * dst) {
    check_kq_mask_desc(d, streams);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        const auto & st = streams[s];
        const auto & ch = changes[s];
        if ((int64_t) ch.prev_tok_pos.size() != d.n_tps || (int64_t) ch.prev_tok_seq.size() != d.n_tps) {
            throw std::invalid_argument("update_kq_mask: previous tokens do not match n_tps");
        }
        for (uint32_t j : ch.cells) {
            if ((int64_t) j >= d.n_kv) throw std::invalid_argument("update_kq_mask: changed cell beyond n_kv");
        }
        for (int64_t i = 0; i < d.n_tps; ++i) {
            const llama_pos p1 = st.tok_pos[i], p1_old = ch.prev_tok_pos[(size_t) i];
            const llama_seq_id seq = st.tok_seq[i];
            if (d.alibi || seq != ch.prev_tok_seq[(size_t) i]) {
                build_row(d, st, s, i, dst);
                continue;
            }
            const size_t base = (size_t) ((s * d.n_tps + i) * d.n_kv);
            for (uint32_t j : ch.cells) store(d, dst, base + j, cell_value(d, st, j, p1, seq));
            if (p1 != p1_old) update_moved_row(d, st, base, p1, p1_old, seq, dst);
        }
    }
}

}  // namespace kvsim
