// The K/V buffers the replay's kernels read, and their content. One cache_buffers per cache: per timed
// layer a K and a V tensor laid out as llama.cpp's (llama_kv_cache's layers[il].k / v: [row_bytes, kv_size,
// n_stream], kernels/kv_tensor.h), in backend memory (host for the CPU backend, device for CUDA). The content
// is kvsim's deterministic function of (layer, K or V, seq, pos) (kernels/kv_content.h: write_kv_cell), written
// through host staging: at allocation for every cell as (seq 0, pos = cell), so timing never reads NaN, and
// with --verify again at each placement, so the shadow (timing/verify.h: cell_shadow) can recompute what a
// cell holds.
#pragma once

#include "attention.h"
#include "kv_content.h"
#include "kv_tensor.h"
#include "kv/kv_cache.h"
#include "timing/mask_tracker.h"
#include "timing/verify.h"

#include <memory>
#include <vector>

namespace kvsim {

// What the buffers are shaped by (the context's model and cache types, and --time-layers).
struct kv_layout {
    ggml_type type_k = ggml_type::f16, type_v = ggml_type::f16;
    uint32_t head_dim = 0;    // n_embd_head_k = n_embd_head_v
    uint32_t n_head_kv = 0;
    uint32_t layers = 1;      // timed layers (>= 1)
};

// The buffers of one cache's timed layers. mask / mask_state are the step kernels' (timing/step_kernels.h):
// one KQ mask per cache, f16 [n_kv, n_tps, n_stream] of the last timed step, grown when a step needs more.
struct cache_buffers {
    const kv_cache * cache = nullptr;
    std::vector<std::shared_ptr<void>> mem;   // owns the K/V tensors' data
    std::vector<kv_tensor> k, v;              // [layers]
    std::shared_ptr<void> mask;
    size_t mask_bytes = 0;
    mask_tracker mask_state;                  // what `mask` was built from (kernel_drive::incremental_mask)
    std::unique_ptr<cell_shadow> shadow;      // --verify only: what each cell's K/V should be
};

// All caches' buffers, and every write to their content. `be` must outlive this.
class kv_buffers {
public:
    // shadow: keep a cell_shadow per cache and rewrite placed cells' rows (--verify).
    kv_buffers(attn_backend & be, const kv_layout & layout, const attn_rot & rot, bool shadow)
        : be_(be), layout_(layout), rot_(rot), shadow_(shadow) {}

    // Allocate and fill the buffers of cache `c` (all its cells, all streams).
    void add(const kv_cache & c);
    // The buffers of `c`; throws std::logic_error for a cache never added (a replay bug).
    cache_buffers & of(const kv_cache & c);
    std::vector<cache_buffers> & all() { return bufs_; }

    // With a shadow: the rows of the cells a ubatch was placed in (sinfo, as llama_kv_cache::apply_ubatch)
    // get the content of their token's (seq, pos), and the shadow records it. Without: nothing.
    void write_placed(cache_buffers & b, const slot_info & sinfo, const ubatch & ub);
    // llama_kv_cache::update: the whole-stream K/V copies queued by cross-stream seq_cp (pending_copies).
    void copy_streams(cache_buffers & b);

private:
    void write_row(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which, llama_seq_id seq,
                   llama_pos pos, int rot_n);

    attn_backend & be_;
    kv_layout layout_;
    attn_rot rot_;
    bool shadow_;
    std::vector<cache_buffers> bufs_;
    std::vector<uint8_t> row_staging_;   // one row on the host, uploaded by write_row
};

// Pending shift of every cell of `c`, [kv_size * n_stream] (llama_kv_cache::set_input_k_shift).
std::vector<int32_t> shift_array(const kv_cache & c);

}  // namespace kvsim
