// Validation of a llama_decode batch and its split into ubatches.
// Source: src/llama-batch.cpp: llama_batch_allocr::init, split_simple, split_equal, ubatch_add.
#pragma once

#include "kv/ubatch.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kvsim {

class kv_memory;

class batch_allocr {
public:
    // Validate the batch against the memory's per-sequence positions, as llama_batch_allocr::init
    // does: seq ids in [0, n_seq_max), a sequence continues at seq_pos_max + 1, positions
    // continuous and non-decreasing, coupled sequences not diverged, no partial sequence subsets.
    // Returns false (llama_decode's -1) and sets *err to upstream's message on violation.
    bool init(const llama_batch_in & batch, const kv_memory & mem, uint32_t n_seq_max, std::string * err);

    void split_reset();
    // Next ubatch of up to n_ubatch consecutive unused tokens; n_tokens == 0 when done.
    ubatch split_simple(uint32_t n_ubatch);
    // Next ubatch of equal-length blocks, one per non-overlapping sequence set; with sequential,
    // sets must have consecutive first seq ids (one stream each). n_tokens == 0 when done or refused.
    ubatch split_equal(uint32_t n_ubatch, bool sequential);

    uint32_t get_n_tokens() const { return (uint32_t) batch_.pos.size(); }
    uint32_t get_n_used() const { return n_used_; }
    const llama_batch_in & batch() const { return batch_; }

private:
    // per-sequence facts of the batch being validated (only entries of seq_unq_ are valid)
    struct seq_pos_stat {
        llama_pos min = -1, max = -1;
        int64_t count = 0;
        bool consecutive = true;    // positions arrived as p, p+1, ... (no sort needed)
        llama_pos last = -1;
        seq_set cpl;                // sequences this one is coupled to (shares a token with)
        seq_set cur_set;
        llama_pos cur_pos = -1;
    };
    bool validate_positions(const kv_memory & mem, std::string * err);
    bool check_coupled(const kv_memory & mem, std::string * err) const;
    bool check_sets_and_order(std::string * err);
    // Per-token sequence sets and the set -> tokens map: only split_equal and coupled batches
    // need them, so they are built on first use (a decode of single-sequence tokens never does).
    void build_sets();
    ubatch ubatch_add(const std::vector<int32_t> & idxs, uint32_t n_seqs, bool equal_seqs) const;

    llama_batch_in batch_;   // a copy: callers may pass a temporary (assignment reuses capacity)
    uint32_t n_seq_max_ = 0;
    bool has_cpl_ = false;
    bool sets_built_ = false;
    // without coupled tokens every token has one sequence, so the subset rule cannot fail and
    // the order rule is checked while scanning: first sequence whose positions decrease, or -1
    llama_seq_id first_decreasing_ = -1;
    std::vector<seq_set> seq_set_;                                  // per token
    std::unordered_map<seq_set, std::vector<int32_t>> seq_set_map_; // set -> its tokens, in order
    std::vector<bool> used_;
    seq_set seq_unq_;
    std::vector<seq_pos_stat> sp_ = std::vector<seq_pos_stat>(LLAMA_MAX_SEQ);
    uint32_t n_used_ = 0;
};

}  // namespace kvsim
