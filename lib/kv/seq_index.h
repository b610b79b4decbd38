// Per-sequence (pos, cell) index of one KV stream: what llama.cpp keeps as
// `std::map<llama_pos, int> seq_pos[LLAMA_MAX_SEQ]` (src/llama-kv-cells.h: llama_kv_cells::seq_pos),
// extended with the cell so a sequence's cells in a position range are found without scanning the
// stream.
#pragma once

#include "core/types.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace kvsim {

// A set of (pos, cell) keys, ordered by pos then cell. The key carries the cell because one
// sequence can hold a position twice (seq_rm + seq_add reuse, a repeated batch).
//
// Why not std::set: a replay places and frees tens of millions of keys, nearly all of them at the
// ends (decode appends the newest position, request end and the SWA purge erase the oldest,
// rollback erases the newest). A sorted vector with a movable front does those in O(1) without a
// node allocation. Edits anywhere else (context shift's seq_rm + seq_add, seq_cp into a sequence
// with later positions) are queued and folded in by one sort + merge before the next read, so a
// bulk edit of k keys costs O(n + k log k), not O(n * k).
//
// Preconditions, as for the set it replaces: insert only keys not present, erase only keys
// present (the end cases meet them by construction; queued edits are checked by assert in debug
// builds when folded).
class seq_index {
public:
    using key = std::pair<llama_pos, uint32_t>;

    void clear();
    bool empty() const;
    // the end cases inline: they are what a replay does tens of millions of times
    void insert(key k) {
        if (!dirty() && live() > 0 && keys_.back() < k) {
            keys_.push_back(k);
            return;
        }
        insert_slow(k);
    }
    void erase(key k) {
        if (!dirty() && live() > 0 && keys_.back() == k) {
            keys_.pop_back();
            return;
        }
        erase_slow(k);
    }
    // Smallest / largest position, -1 when empty.
    llama_pos pos_min() const;
    llama_pos pos_max() const;
    // Cells with p0 <= pos < p1, in (pos, cell) order, appended to out.
    void cells_in(llama_pos p0, llama_pos p1, std::vector<uint32_t> & out) const;
    // Number of keys (folds pending edits).
    size_t size() const;

private:
    void insert_slow(key k);
    void erase_slow(key k);
    bool dirty() const { return !ins_.empty() || !era_.empty(); }
    void fold() const;   // applies queued edits; logically const
    size_t live() const { return keys_.size() - head_; }

    // keys_[head_..] are the sorted live keys; keys_[0..head_) were erased from the front
    mutable std::vector<key> keys_;
    mutable size_t head_ = 0;
    // queued edits, applied as multiset arithmetic: keys_ + ins_ - era_
    mutable std::vector<key> ins_;
    mutable std::vector<key> era_;
    mutable std::vector<key> tmp_;
};

}  // namespace kvsim
