// Basic llama.cpp KV-cache vocabulary shared by lib/ and kernels/.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvsim {

using llama_pos    = int32_t;  // token position (llama.h: llama_pos)
using llama_seq_id = int32_t;  // sequence id   (llama.h: llama_seq_id)

// Maximum number of sequences (src/llama-cparams.h: LLAMA_MAX_SEQ).
constexpr int LLAMA_MAX_SEQ = 256;

// Set of sequences owning one cell (src/llama-kv-cells.h: llama_kv_cells::seq_set_t).
using seq_set = std::bitset<LLAMA_MAX_SEQ>;

// The set bits of a seq_set in increasing order: for (size_t s = seq_first(b); s < b.size(); s = seq_next(b, s)).
// libstdc++'s word-at-a-time scans (_Find_first/_Find_next, what upstream's loops over seq_pos and
// seq sets amount to) behind one name; another standard library gets the bit-by-bit loop. Both
// return b.size() when no further bit is set.
inline size_t seq_first(const seq_set & b) {
#if defined(__GLIBCXX__)
    return b._Find_first();
#else
    size_t i = 0;
    while (i < b.size() && !b[i]) ++i;
    return i;
#endif
}
inline size_t seq_next(const seq_set & b, size_t prev) {
#if defined(__GLIBCXX__)
    return b._Find_next(prev);
#else
    size_t i = prev + 1;
    while (i < b.size() && !b[i]) ++i;
    return i;
#endif
}

// Sliding-window attention type (src/llama-hparams.h: llama_swa_type).
enum class swa_type { none, standard, chunked, symmetric };

// True when a key at position p0 is outside the window of a query at position p1.
// p0, p1 >= 0 (tokens). Source: src/llama-hparams.h: llama_hparams::is_masked_swa.
//   standard : p1 - p0 >= n_swa
//   chunked  : p0 < (p1 / n_swa) * n_swa
//   symmetric: |p1 - p0| > n_swa / 2
inline bool is_masked_swa(uint32_t n_swa, swa_type type, llama_pos p0, llama_pos p1) {
    switch (type) {
        case swa_type::none: return false;
        case swa_type::standard: return p1 - p0 >= (int32_t) n_swa;
        case swa_type::chunked: return p0 < (p1 / (int32_t) n_swa) * (int32_t) n_swa;
        case swa_type::symmetric: {
            const int32_t half = (int32_t) n_swa / 2;
            const int32_t diff = p1 - p0;
            return diff < -half || diff > half;
        }
    }
    return false;
}

// Parse "none|standard|chunked|symmetric"; throws std::invalid_argument otherwise.
swa_type parse_swa_type(const std::string & s);
const char * swa_type_name(swa_type t);

}  // namespace kvsim
