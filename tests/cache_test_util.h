// Helpers shared by the KV-cache unit tests: ubatch builders and compact cell dumps.
#pragma once

#include "kv/kv_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace kvsim::test {

// n tokens of sequence s at positions p0, p0 + 1, ... as one split_simple-style ubatch.
inline ubatch ub_seq(llama_seq_id s, llama_pos p0, uint32_t n) {
    ubatch ub;
    ub.n_tokens = n;
    ub.n_seq_tokens = n;
    ub.n_seqs = 1;
    for (uint32_t i = 0; i < n; ++i) {
        ub.pos.push_back(p0 + (llama_pos) i);
        ub.seq_id.push_back({s});
    }
    ub.seq_id_unq = {s};
    ub.n_seqs_unq = 1;
    return ub;
}

// split_equal-style ubatch: for each (seq, p0), n tokens of that sequence; seqs ascending.
inline ubatch ub_equal(const std::vector<std::pair<llama_seq_id, llama_pos>> & seqs, uint32_t n) {
    ubatch ub;
    ub.equal_seqs = true;
    ub.n_tokens = n * (uint32_t) seqs.size();
    ub.n_seq_tokens = n;
    ub.n_seqs = (uint32_t) seqs.size();
    for (const auto & [s, p0] : seqs) {
        for (uint32_t i = 0; i < n; ++i) {
            ub.pos.push_back(p0 + (llama_pos) i);
            ub.seq_id.push_back({s});
        }
        ub.seq_id_unq.push_back(s);
    }
    ub.n_seqs_unq = ub.n_seqs;
    return ub;
}

// find_slot (cont = false) + apply_ubatch, as llama_decode does for one ubatch; returns the slot.
inline slot_info place(kv_cache & kv, const ubatch & ub) {
    slot_info si = kv.find_slot(ub, false);
    REQUIRE_FALSE(si.empty());
    kv.apply_ubatch(si, ub);
    return si;
}

// Non-empty cells as "idx:pos{s,s}" (plus "~shift" when a shift is pending), space separated.
inline std::string dump(const kv_cells & c) {
    std::string out;
    for (uint32_t i = 0; i < c.size(); ++i) {
        if (c.is_empty(i)) {
            continue;
        }
        // fmt avoids GCC 12's -Wrestrict false positive on chained std::string concatenation
        out += fmt::format("{}{}:{}{{", out.empty() ? "" : " ", i, c.pos_get(i));
        bool first = true;
        for (int s = 0; s < LLAMA_MAX_SEQ; ++s) {
            if (c.seq_has(i, s)) {
                out += fmt::format("{}{}", first ? "" : ",", s);
                first = false;
            }
        }
        out += "}";
        if (c.get_shift(i) != 0) {
            out += fmt::format("~{}", c.get_shift(i));
        }
    }
    return out;
}

// Per-token seq ids of a ubatch as plain rows, for comparisons.
template <class Table>
std::vector<std::vector<llama_seq_id>> seq_rows(const Table & t) {
    std::vector<std::vector<llama_seq_id>> rows;
    for (size_t i = 0; i < t.size(); ++i) {
        rows.emplace_back(t[i].begin(), t[i].end());
    }
    return rows;
}

inline std::vector<uint32_t> iota_idxs(uint32_t from, uint32_t n) {
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < n; ++i) {
        v.push_back(from + i);
    }
    return v;
}

}  // namespace kvsim::test
