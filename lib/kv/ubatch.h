// Batches as llama_decode sees them, and their ubatch splits.
// Source: src/llama-batch.h: llama_ubatch; include/llama.h: llama_batch.
#pragma once

#include "core/types.h"

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace kvsim {

// The sequence ids of each token, stored flat (one allocation for the whole batch instead of
// one per token). ids(i) / operator[](i) is the list of token i; the first id is the one
// llama.cpp uses for masks and streams (seq_id[i][0]).
class seq_id_table {
public:
    seq_id_table() = default;
    seq_id_table(std::initializer_list<std::vector<llama_seq_id>> rows) {
        for (const auto & r : rows) push_back(r);
    }
    void push_back(std::span<const llama_seq_id> ids) {
        data_.insert(data_.end(), ids.begin(), ids.end());
        off_.push_back((uint32_t) data_.size());
    }
    void push_back(std::initializer_list<llama_seq_id> ids) { push_back(std::span<const llama_seq_id>(ids.begin(), ids.size())); }
    void push_back(const std::vector<llama_seq_id> & ids) { push_back(std::span<const llama_seq_id>(ids)); }
    std::span<const llama_seq_id> operator[](size_t i) const {
        const uint32_t b = i == 0 ? 0 : off_[i - 1];
        return {data_.data() + b, off_[i] - b};
    }
    size_t size() const { return off_.size(); }
    bool empty() const { return off_.empty(); }
    void reserve(size_t n_tokens) {
        off_.reserve(n_tokens);
        data_.reserve(n_tokens);
    }
    void clear() {
        off_.clear();
        data_.clear();
    }

private:
    std::vector<uint32_t> off_;        // end offset of token i's ids in data_
    std::vector<llama_seq_id> data_;
};

// One llama_decode input: token i has position pos[i] and belongs to seq_id[i] (one or more ids).
// Positions are explicit (clients such as llama-server and kvoracle always pass them).
struct llama_batch_in {
    std::vector<llama_pos> pos;
    seq_id_table seq_id;

    uint32_t n_tokens() const { return (uint32_t) pos.size(); }
    void add(llama_pos p, std::span<const llama_seq_id> seqs) {
        pos.push_back(p);
        seq_id.push_back(seqs);
    }
    void add(llama_pos p, std::initializer_list<llama_seq_id> seqs) {
        add(p, std::span<const llama_seq_id>(seqs.begin(), seqs.size()));
    }
    void add(llama_pos p, const std::vector<llama_seq_id> & seqs) { add(p, std::span<const llama_seq_id>(seqs)); }
};

// A ubatch: n_tokens tokens in n_seqs equal blocks of n_seq_tokens when equal_seqs
// (split_equal), else one block (split_simple). seq_id_unq lists the distinct seq ids, ascending.
struct ubatch {
    bool equal_seqs = false;
    uint32_t n_tokens = 0;
    uint32_t n_seq_tokens = 0;
    uint32_t n_seqs = 0;
    uint32_t n_seqs_unq = 0;
    std::vector<llama_pos> pos;
    seq_id_table seq_id;
    std::vector<llama_seq_id> seq_id_unq;
};

// Where a ubatch goes: for stream block s, the stream strm[s] and its cells idxs[s]
// (src/llama-kv-cache.h: llama_kv_cache::slot_info). Empty = no slot found.
struct slot_info {
    uint32_t s0 = 0;
    uint32_t s1 = 0;
    std::vector<uint32_t> strm;
    std::vector<std::vector<uint32_t>> idxs;

    bool empty() const { return idxs.empty(); }
    uint32_t n_stream() const { return (uint32_t) strm.size(); }
    uint32_t size() const { return idxs.empty() ? 0 : (uint32_t) idxs[0].size(); }
};

}  // namespace kvsim
