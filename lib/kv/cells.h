// Cell metadata of one KV-cache stream: the bookkeeping half of llama.cpp's KV cache.
// Source: src/llama-kv-cells.h: class llama_kv_cells (behaviour mirrored call for call).
#pragma once

#include "kv/seq_index.h"
#include "core/types.h"

#include <cassert>
#include <cstdint>
#include <vector>

namespace kvsim {

// Cells of one stream. Cell i is empty iff pos[i] == -1. Data structures differ from llama.cpp
// (a free-cell bit index instead of std::set<uint32_t> used, and per sequence a seq_index of
// (pos, cell) keys instead of upstream's counted std::map<llama_pos, int> seq_pos), behaviour does not.
class kv_cells {
public:
    // Copy of pos and seq of a list of cells, for prepare()'s rollback (llama_kv_cells::cp(idxs)).
    // Like upstream it does not carry the shift: a restored cell keeps the shift it has at restore time.
    struct snapshot {
        std::vector<uint32_t> idxs;
        std::vector<llama_pos> pos;
        std::vector<seq_set> seq;
    };

    // Resize to n cells and reset them all (llama_kv_cells::resize).
    void resize(uint32_t n);
    // Empty every cell, clear shifts and per-sequence positions (llama_kv_cells::reset).
    void reset();
    // Zero every pending shift (llama_kv_cells::reset_shift), done after a K-shift was applied.
    void reset_shift();

    uint32_t size() const { return (uint32_t) pos_.size(); }
    bool is_empty(uint32_t i) const {
        assert(i < pos_.size());
        assert(pos_[i] >= -1);
        return pos_[i] == -1;
    }
    // Number of non-empty cells.
    uint32_t get_used() const { return n_used_; }
    // Index of the last non-empty cell + 1, or 0 (llama_kv_cells::used_max_p1).
    uint32_t used_max_p1() const;
    bool get_has_shift() const { return has_shift_; }

    snapshot cp(const std::vector<uint32_t> & idxs) const;
    // Restore the cells of a snapshot (llama_kv_cells::set(idxs, other)).
    void set(const snapshot & s);

    // prepare()'s dry run on a cache without SWA: find_slot only looks at which cells are empty
    // and at the used count, so the tentative placement marks the cells used (pos 0, no sequence)
    // and unmark() undoes it, without touching the per-sequence index.
    void dry_mark(const std::vector<uint32_t> & idxs);
    void dry_unmark(const std::vector<uint32_t> & idxs);

    // Free a non-empty cell regardless of its sequences (llama_kv_cells::rm).
    void rm(uint32_t i);
    // Remove seq s from cell i, which must hold it; true if the cell became empty.
    bool seq_rm(uint32_t i, llama_seq_id s);
    // Keep only seq s in cell i (free the cell if it lacks s but holds others); true if freed.
    bool seq_keep(uint32_t i, llama_seq_id s);
    // Preconditions as upstream's (asserted in debug builds): i < size(), a non-empty cell for
    // seq_count, pos_get and get_shift, s >= 0 for seq_has.
    int seq_count(uint32_t i) const {
        assert(i < pos_.size());
        assert(pos_[i] != -1);
        return (int) seq_[i].count();
    }
    bool seq_has(uint32_t i, llama_seq_id s) const {
        assert(i < pos_.size());
        assert(s >= 0);
        return seq_[i].test(s);
    }
    // Add seq s to a non-empty cell; a no-op when the cell already holds it (upstream's set
    // semantics: a repeated seq_cp must not count a position twice).
    void seq_add(uint32_t i, llama_seq_id s);
    // The only sequence of a cell with exactly one sequence.
    llama_seq_id seq_get(uint32_t i) const;
    const seq_set & seq_get_all(uint32_t i) const {
        assert(i < pos_.size());
        return seq_[i];
    }

    // Smallest / largest position of seq s in this stream, -1 if absent.
    llama_pos seq_pos_min(llama_seq_id s) const;
    llama_pos seq_pos_max(llama_seq_id s) const;

    llama_pos pos_get(uint32_t i) const {
        assert(i < pos_.size());
        assert(pos_[i] != -1);
        return pos_[i];
    }
    // Cells holding seq s in this stream (the size of llama_kv_cells::seq_pos[s], with repeats).
    size_t seq_n_cells(llama_seq_id s) const {
        assert(s >= 0 && (size_t) s < seq_pos_.size());
        return seq_pos_[s].size();
    }
    llama_pos get_shift(uint32_t i) const {
        assert(i < pos_.size());
        assert(pos_[i] != -1);
        return shift_[i];
    }
    // Non-empty and p0 <= pos < p1.
    bool pos_in(uint32_t i, llama_pos p0, llama_pos p1) const {
        assert(i < pos_.size());
        return pos_[i] >= p0 && pos_[i] < p1;
    }

    // Give an empty cell a position; sequences are added afterwards with seq_add.
    void pos_set(uint32_t i, llama_pos p);
    // pos_set(i, p) with a pending shift: a cell copied across streams with its shift (kv_cache::seq_cp_cross_stream).
    void pos_set_shifted(uint32_t i, llama_pos p, llama_pos shift);
    // pos += d and shift += d; frees the cell (true) when pos becomes negative (llama_kv_cells::pos_add).
    bool pos_add(uint32_t i, llama_pos d);
    // pos /= d and shift += old - new: upstream's sign, opposite to pos_add's (llama_kv_cells::pos_div).
    void pos_div(uint32_t i, int d);
    // The position and pending shift pos_add(i, d) / pos_div(i, d > 0) would leave in non-empty
    // cell i, in 64 bits: the op door (drive/op_runner.h) refuses an op that would take one of
    // them out of int32 instead of letting llama_pos overflow.
    struct pos_shift {
        int64_t pos, shift;
    };
    pos_shift pos_add_result(uint32_t i, llama_pos d) const {
        assert(pos_[i] != -1);
        return {(int64_t) pos_[i] + d, (int64_t) shift_[i] + d};
    }
    pos_shift pos_div_result(uint32_t i, int d) const {
        assert(pos_[i] != -1 && d > 0);
        const int64_t p = pos_[i] / d;
        return {p, (int64_t) shift_[i] + (pos_[i] - p)};
    }

    // Cells holding seq s with p0 <= pos < p1, in position order.
    std::vector<uint32_t> seq_cells(llama_seq_id s, llama_pos p0, llama_pos p1) const;

    // Cells with a non-zero pending shift.
    uint32_t n_shifted() const { return n_shifted_; }
    // Maximal runs of empty cells, and the longest one (cells).
    std::pair<uint32_t, uint32_t> free_runs() const;

    // Index of the first empty cell at or after `from`, or size() if none.
    uint32_t next_empty(uint32_t from) const;

    // Raw per-cell arrays of length size(), for mask building and dumps.
    const std::vector<llama_pos> & pos() const { return pos_; }
    const std::vector<llama_pos> & shift() const { return shift_; }
    const std::vector<seq_set> & seq() const { return seq_; }

private:
    void set_shift(uint32_t i, llama_pos v) {
        n_shifted_ += (v != 0) - (shift_[i] != 0);
        shift_[i] = v;
    }
    void mark_used(uint32_t i);
    void mark_free(uint32_t i);
    void seq_pos_inc(llama_seq_id s, uint32_t i);
    void seq_pos_dec(llama_seq_id s, uint32_t i);
    void seq_pos_add_cell(uint32_t i);
    void seq_pos_rm_cell(uint32_t i);

    std::vector<llama_pos> pos_;
    // accumulated, not yet applied position deltas: one K-shift pass rotates by all of them at once
    std::vector<llama_pos> shift_;
    std::vector<seq_set> seq_;
    // bit i set = cell i empty; lets find_slot skip full regions 64 cells at a time
    std::vector<uint64_t> empty_bits_;
    uint32_t n_used_ = 0;
    // upper bound of used_max_p1, tightened lazily
    mutable uint32_t used_hi_ = 0;
    bool has_shift_ = false;
    // (pos, cell) keys per sequence: min/max at the ends, and the cells of a sequence in a
    // position range without scanning the whole stream
    std::vector<seq_index> seq_pos_;
    uint32_t n_shifted_ = 0;   // cells with a non-zero pending shift
};

}  // namespace kvsim
