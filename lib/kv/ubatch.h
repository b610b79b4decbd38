// Batches as llama_decode sees them, and their ubatch splits.
// Source: src/llama-batch.h: llama_ubatch; include/llama.h: llama_batch.
#pragma once

#include "kv/types.h"

#include <cstdint>
#include <vector>

namespace kvsim {

// One llama_decode input: token i has position pos[i] and belongs to seq_id[i] (one or more ids).
// Positions are explicit (clients such as llama-server and kvoracle always pass them).
struct llama_batch_in {
    std::vector<llama_pos> pos;
    std::vector<std::vector<llama_seq_id>> seq_id;

    uint32_t n_tokens() const { return (uint32_t) pos.size(); }
    void add(llama_pos p, std::vector<llama_seq_id> seqs) {
        pos.push_back(p);
        seq_id.push_back(std::move(seqs));
    }
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
    std::vector<std::vector<llama_seq_id>> seq_id;
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
