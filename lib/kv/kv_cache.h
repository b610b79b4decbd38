// One llama.cpp KV cache: streams of cells, the find_slot ring allocator, sequence operations.
// Source: src/llama-kv-cache.cpp: class llama_kv_cache (bookkeeping only: no tensors here).
#pragma once

#include "kv/cells.h"
#include "kv/ubatch.h"

#include <string>
#include <utility>
#include <vector>

namespace kvsim {

struct kv_cache_params {
    std::string name = "kv";   // "kv", or "base" / "swa" inside an iSWA pair (kvoracle's names)
    uint32_t kv_size = 256;    // cells per stream
    uint32_t n_seq_max = 1;
    bool unified = false;      // one stream shared by all sequences (-kvu)
    uint32_t n_swa = 0;
    swa_type swa = swa_type::none;
    uint32_t n_pad = 1;        // create_memory passes 1; n_kv pads to max(n_pad, 256)
};

// Counters of allocator events since construction (for occupancy reports; not in llama.cpp).
struct kv_cache_stats {
    uint64_t swa_reused = 0;   // non-empty SWA-masked cells overwritten by apply_ubatch
    uint64_t swa_purged = 0;   // purge seq_rm calls issued by apply_ubatch
};

class kv_cache {
public:
    // Throws lib_invalid_argument (core/errors.h) when kv_size == 0, n_seq_max is 0 or > LLAMA_MAX_SEQ.
    explicit kv_cache(const kv_cache_params & p);

    const kv_cache_params & params() const { return p_; }
    const std::string & name() const { return p_.name; }
    uint32_t get_size() const { return p_.kv_size; }
    uint32_t get_n_stream() const { return n_stream_; }
    uint32_t seq_to_stream(llama_seq_id s) const { return n_stream_ == 1 ? 0 : (uint32_t) s; }
    // Number of valid seq ids for the sequence ops: LLAMA_MAX_SEQ when one stream, else n_stream.
    uint32_t n_seq_ids() const { return n_stream_ == 1 ? LLAMA_MAX_SEQ : n_stream_; }
    const kv_cells & cells(uint32_t stream) const { return cells_[stream]; }
    uint32_t head(uint32_t stream) const { return heads_[stream]; }
    const kv_cache_stats & stats() const { return stats_; }

    // Empty all streams, heads to 0 (llama_kv_cache::clear).
    void clear();
    // Remove seq_id (-1: every sequence, every stream) from cells with pos in [p0, p1)
    // (p0 < 0 -> 0, p1 < 0 -> infinity); lowers head to the first freed cell. Always true.
    bool seq_rm(llama_seq_id seq_id, llama_pos p0, llama_pos p1);
    // Share cells of src in [p0, p1) with dst (same stream), or copy src's cells into dst's stream
    // (different streams: full ranges only; the data copy is queued for the next update).
    // Throws lib_invalid_argument for a partial cross-stream range (upstream aborts).
    void seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1);
    void seq_keep(llama_seq_id seq_id);
    // pos += delta for seq_id's cells in [p0, p1); cells below 0 are freed; head = first freed or 0.
    void seq_add(llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta);
    // pos /= d for seq_id's cells in [p0, p1); heads unchanged.
    void seq_div(llama_seq_id seq_id, llama_pos p0, llama_pos p1, int d);
    llama_pos seq_pos_min(llama_seq_id seq_id) const;
    llama_pos seq_pos_max(llama_seq_id seq_id) const;

    // First usable cells for the ubatch in ring order from each stream's head (const: heads are
    // not moved). cont = contiguous run. Empty result = no slot (llama_kv_cache::find_slot).
    slot_info find_slot(const ubatch & ub, bool cont) const;
    // Write the ubatch into the slot: SWA-reused cells are overwritten and their sequences purged
    // below the overwritten positions; head = last cell + 1 (llama_kv_cache::apply_ubatch).
    void apply_ubatch(const slot_info & sinfo, const ubatch & ub);
    // llama_kv_cache::state_read_meta for one sequence: seq_rm(dest, -1, -1), then the saved cells'
    // positions (cell order) as one ubatch placed by find_slot(cont = false) and apply_ubatch. An
    // empty list touches nothing (state_read skips streams without cells). false = no room: dest's
    // cells are removed again (state_read's failure path).
    // placed (optional) receives the slot and the ubatch that were applied.
    bool restore_seq(llama_seq_id dest, const std::vector<llama_pos> & pos, std::pair<slot_info, ubatch> * placed = nullptr);
    // Dry run of all ubatches with rollback of the touched cells and heads; empty on failure.
    // The SWA purge of apply_ubatch is not rolled back (upstream behaviour).
    std::vector<slot_info> prepare(const std::vector<ubatch> & ubatches);
    // Cells the attention reads for this ubatch: used extent padded to 256, capped at kv_size.
    uint32_t get_n_kv(const slot_info & sinfo) const;

    bool get_has_shift() const;
    // Pending cross-stream buffer copies (src stream, dst stream) queued by seq_cp.
    const std::vector<std::pair<uint32_t, uint32_t>> & pending_copies() const { return sc_info_; }
    // Apply pending copies and shifts: zero the shifts (the K-shift kernel runs before this)
    // and drop the copy queue (llama_kv_cache::update).
    void update();

private:
    void check_seq(llama_seq_id s, bool allow_all) const;
    void lower_head(uint32_t stream, uint32_t new_head);
    bool cell_usable(const kv_cells & c, uint32_t idx) const;
    bool find_slot_stream(const kv_cells & c, uint32_t head_cur, uint32_t n_tokens, bool cont,
                          std::vector<uint32_t> & idxs) const;
    void seq_cp_cross_stream(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1);

    kv_cache_params p_;
    uint32_t n_stream_;
    std::vector<kv_cells> cells_;
    std::vector<uint32_t> heads_;
    std::vector<std::pair<uint32_t, uint32_t>> sc_info_;
    kv_cache_stats stats_;
};

}  // namespace kvsim
