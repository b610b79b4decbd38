// Shared by the kernel tests (test_fa, test_mask, test_cuda): the CPU and CUDA backends are checked on
// the same inputs, so the inputs are built in one place.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention.h"
#include "kv_content.h"

namespace kvsim::test {

// One stream's KQ-mask inputs, owned; view() is what build_kq_mask takes.
struct mask_stream_data {
    std::vector<llama_pos> cell_pos;
    std::vector<seq_set> cell_seq;
    std::vector<llama_pos> tok_pos;
    std::vector<llama_seq_id> tok_seq;
    kq_mask_stream view() const { return {cell_pos.data(), cell_seq.data(), tok_pos.data(), tok_seq.data()}; }
};

// Cells with holes (~20 % empty), positions in [0, 3*n_kv/2), 1-2 of 4 seqs per cell; tokens at positions that
// straddle the cached ones. high_seqs: also seq ids 200..255 (the seq set's high words, which the CUDA
// backend uploads as separate 32-bit words) in cells and, one token in five, as the token's seq.
inline mask_stream_data random_stream(std::mt19937 & rng, int64_t n_kv, int64_t n_tps, bool high_seqs = false) {
    mask_stream_data s;
    for (int64_t j = 0; j < n_kv; ++j) {
        const bool empty = rng() % 5 == 0;
        s.cell_pos.push_back(empty ? -1 : (llama_pos) (rng() % (3 * n_kv / 2 + 1)));
        seq_set ss;
        if (!empty) {
            ss.set(rng() % 4);
            if (rng() % 3 == 0) ss.set(high_seqs ? 200 + rng() % 56 : rng() % 4);
        }
        s.cell_seq.push_back(ss);
    }
    for (int64_t i = 0; i < n_tps; ++i) {
        s.tok_pos.push_back((llama_pos) (rng() % (3 * n_kv / 2 + 8)));
        s.tok_seq.push_back((llama_seq_id) (high_seqs && rng() % 5 == 0 ? 200 + rng() % 56 : rng() % 4));
    }
    return s;
}

// The fa_desc of a test case (fields head_dim, n_head_kv, gqa, n_kv, n_tps, n_stream, scale (0 = 1/sqrt(head_dim)),
// softcap, max_bias), with the cache's rotation.
template <class Case>
fa_desc fa_desc_of(const Case & c, const attn_rot & rot) {
    fa_desc d;
    d.head_dim_k = d.head_dim_v = c.head_dim;
    d.n_head_kv = c.n_head_kv;
    d.n_head = c.n_head_kv * c.gqa;
    d.n_kv = c.n_kv;
    d.n_tps = c.n_tps;
    d.n_stream = c.n_stream;
    d.scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt((float) c.head_dim);
    d.softcap = c.softcap;
    d.max_bias = c.max_bias;
    d.rot = rot;
    return d;
}

// Every cell of every stream of host tensors k and v: sequence s at position = cell (kv_content.h).
inline void write_kv_cells(const kv_tensor & k, const kv_tensor & v, const attn_rot & rot) {
    for (int64_t s = 0; s < k.n_stream; ++s) {
        for (int64_t j = 0; j < k.kv_size; ++j) {
            write_kv_cell(k, s, j, 0, kv_which::k, (llama_seq_id) s, (llama_pos) j, rot.n_k);
            write_kv_cell(v, s, j, 0, kv_which::v, (llama_seq_id) s, (llama_pos) j, rot.n_v);
        }
    }
}

// The KQ mask of a flash-attention test case, built by be: each stream's cells hold positions 0..kv_size-1 of
// seq 0 with a hole every hole_every cells (0 = none), the n_tps tokens sit at the end (n_kv - n_tps ..), and
// with mask_all token 0 belongs to a seq that owns no cell (a fully masked row). A case with `seqs` > 1 spreads
// the cells round-robin over seqs 0..seqs-1 and gives token t seq t % seqs, as a unified cache decoding `seqs`
// sequences together holds them; seq0_all adds seq 0 to every cell (a prefix shared by seq_cp, say). Standard SWA when n_swa > 0,
// ALiBi when max_bias > 0, f32 when mask_f32 else f16 (then the first half of the buffer is used).
struct case_mask {
    kq_mask_desc desc;
    std::vector<float> data;
};

template <class Case>
case_mask build_case_mask(const Case & c, int64_t kv_size, attn_backend & be) {
    int seqs = 1;
    bool seq0_all = false;
    if constexpr (requires { c.seqs; }) seqs = c.seqs;
    if constexpr (requires { c.seq0_all; }) seq0_all = c.seq0_all;
    std::vector<llama_pos> cell_pos((size_t) kv_size);
    std::vector<seq_set> cell_seq((size_t) kv_size);
    for (int64_t j = 0; j < kv_size; ++j) {
        const bool hole = c.hole_every && j % c.hole_every == 3;
        cell_pos[(size_t) j] = hole ? -1 : (llama_pos) j;
        if (!hole) cell_seq[(size_t) j].set((llama_seq_id) (j % seqs));
        if (!hole && seq0_all) cell_seq[(size_t) j].set(0);
    }
    std::vector<std::vector<llama_pos>> tp((size_t) c.n_stream);
    std::vector<std::vector<llama_seq_id>> ts((size_t) c.n_stream);
    std::vector<kq_mask_stream> views;
    for (int64_t s = 0; s < c.n_stream; ++s) {
        for (int64_t t = 0; t < c.n_tps; ++t) {
            tp[(size_t) s].push_back((llama_pos) (c.n_kv - c.n_tps + t));
            ts[(size_t) s].push_back(c.mask_all && t == 0 ? (llama_seq_id) seqs : (llama_seq_id) (t % seqs));
        }
        views.push_back({cell_pos.data(), cell_seq.data(), tp[(size_t) s].data(), ts[(size_t) s].data()});
    }
    case_mask m;
    m.desc.n_kv = c.n_kv;
    m.desc.n_tps = c.n_tps;
    m.desc.n_stream = c.n_stream;
    m.desc.n_swa = c.n_swa;
    m.desc.swa = c.n_swa ? swa_type::standard : swa_type::none;
    m.desc.alibi = c.max_bias > 0.0f;
    m.desc.type = c.mask_f32 ? ggml_type::f32 : ggml_type::f16;
    m.data.resize((size_t) (c.n_kv * c.n_tps * c.n_stream));
    be.build_kq_mask(m.desc, views.data(), m.data.data());
    return m;
}

}  // namespace kvsim::test
