// KQ mask on the CPU, full and incremental (llama-kv-cache.cpp: set_input_kq_mask_impl).
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
// test reads only cell_pos (4 bytes/cell) instead of the 32-byte seq set and the mask store.
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
            if (p1 == p1_old) continue;
            for (int64_t j = 0; j < d.n_kv; ++j) {
                const llama_pos p0 = st.cell_pos[j];
                if (p0 >= 0 && pos_visible(d, p0, p1) != pos_visible(d, p0, p1_old)) {
                    store(d, dst, base + (size_t) j, cell_value(d, st, j, p1, seq));
                }
            }
        }
    }
}

}  // namespace kvsim
