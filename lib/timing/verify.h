// --verify: the end-to-end proof that allocator, mask, K-shift and kernel agree. For each
// sequence of a sampled ubatch, the kernel output computed through the cache (mask, shifts,
// SWA reuse, shared cells and all) is compared with naive attention in double over that
// sequence's own cells, whose K/V are recomputed from what was written there (kv_content) and
// rotated by the shifts applied since (tracked independently of the cache in cell_shadow).
#pragma once

#include "attention.h"
#include "kv/kv_cache.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace kvsim {

// What each cell's K/V data should be: written for (seq, pos) and RoPE-rotated by `rot` since.
class cell_shadow {
public:
    cell_shadow(uint32_t kv_size, uint32_t n_stream) : kv_size_(kv_size), cells_((size_t) kv_size * n_stream) {}
    void place(uint32_t stream, uint32_t cell, llama_seq_id seq, llama_pos pos) { at(stream, cell) = {seq, pos, 0}; }
    // A K-shift rotated every cell i by shift[i] ([kv_size * n_stream]), a shift of 0 included: ggml's rope scales
    // every row it rotates by the pass's magnitude (1 unless YaRN or --yarn-attn-factor), so passes are counted.
    void apply_shift(const std::vector<int32_t> & shift);
    // Whole-stream buffer copies of llama_kv_cache::update (src, dst).
    void apply_copies(const std::vector<std::pair<uint32_t, uint32_t>> & copies);

    struct cell_data {
        llama_seq_id seq = 0;
        llama_pos pos = 0;
        int64_t rot = 0;
        uint32_t passes = 0;  // K-shifts since the cell was written
    };
    const cell_data & get(uint32_t stream, uint32_t cell) const { return cells_[(size_t) stream * kv_size_ + cell]; }

private:
    cell_data & at(uint32_t stream, uint32_t cell) { return cells_[(size_t) stream * kv_size_ + cell]; }
    uint32_t kv_size_;
    std::vector<cell_data> cells_;
};

struct verify_stats {
    uint64_t steps = 0;
    uint64_t sequences = 0;
    uint64_t failures = 0;
    double max_err = 0;
    std::vector<std::string> first_failures;   // at most 5 descriptions
    nlohmann::json json() const;
};

// Max |out - expected| allowed per K/V type pair (outputs are in [-1, 1]): f32 1e-4, f16 4e-3,
// q8_0 4e-2, q4_0 2.5e-1 (the coarser of K and V decides; requantisation after K-shifts included).
double verify_tolerance(ggml_type type_k, ggml_type type_v);

// Check the last token of every sequence in the ubatch. q/out: the kernel's input and output
// for this call ([head_dim, n_head, n_tps, n_stream]); layer 0 content.
void verify_step(const cell_shadow & shadow, const kv_cache & c, const slot_info & sinfo, const ubatch & ub,
                 const fa_desc & d, const std::vector<float> & q, const std::vector<float> & out, const rope_params & rope,
                 ggml_type type_k, ggml_type type_v, verify_stats & stats);

}  // namespace kvsim
