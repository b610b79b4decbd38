// Incremental KQ mask for the replay's timed steps. llama.cpp rebuilds the whole mask on the host every ubatch
// (llama-kv-cache.cpp: set_input_kq_mask) and uploads it; a GPU run instead keeps the mask in device memory and
// rewrites only what changed (attn_backend::update_kq_mask, bit-equal to a full build). This class remembers what
// the mask in one buffer was built from (shape, cache streams, tokens, and the cell metadata of cells [0, n_kv)
// of each stream) and lists, for the next step, the cells whose pos or seq set changed since.
#pragma once

#include "attention.h"

#include <cstdint>
#include <vector>

namespace kvsim {

class mask_tracker {
public:
    // True when the mask in the tracked buffer was built with the same desc and the same cache streams (strm:
    // [d.n_stream], the stream of each ubatch stream block), so update_kq_mask(d, streams, changes(), dst) gives
    // the mask of this step; changes() then lists, per stream block, the changed cells and the previous tokens.
    // False: build the mask from scratch. streams: [d.n_stream], as for build_kq_mask.
    bool plan(const kq_mask_desc & d, const std::vector<uint32_t> & strm, const kq_mask_stream * streams);
    const kq_mask_change * changes() const { return changes_.data(); }
    // Record that the buffer now holds the mask of (d, strm, streams). Call after every build or update.
    void remember(const kq_mask_desc & d, const std::vector<uint32_t> & strm, const kq_mask_stream * streams);
    // The buffer was reallocated or overwritten: the next step builds from scratch.
    void forget() { valid_ = false; }

private:
    bool valid_ = false;
    kq_mask_desc d_;
    std::vector<uint32_t> strm_;
    std::vector<std::vector<llama_pos>> pos_;   // [n_stream][n_kv] cell positions of the last build
    std::vector<std::vector<seq_set>> seq_;     // [n_stream][n_kv] cell seq sets of the last build
    std::vector<kq_mask_change> changes_;       // [n_stream]; prev_tok_* hold the last build's tokens
};

}  // namespace kvsim
