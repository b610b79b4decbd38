// Measured kernel timings of a replay: one row per timed step (bandwidth.csv).
#pragma once

#include <cstdint>
#include <string>

namespace kvsim {

struct bandwidth_row {
    uint64_t step = 0;          // scheduler step / op number
    double sim_time = 0;        // simulated seconds at the step
    std::string cache;          // kv | base | swa
    uint32_t n_kv = 0;          // cells attended per stream
    uint32_t tokens = 0;        // query tokens in the ubatch
    uint32_t n_stream = 1;
    uint32_t layers_timed = 0;  // layers with real buffers; times below are per timed layer
    uint64_t kv_bytes = 0;      // K+V bytes of the cells below n_kv held by the ubatch's sequences (one layer):
                                // what attention must read (tiles masked for every token are skipped)
    uint64_t mask_bytes = 0;    // KQ mask bytes written
    uint64_t shift_bytes = 0;   // K bytes read+written by a K-shift before this step (0 if none)
    double mask_ns = 0;         // mask build (full or incremental), one layer's mask (shared by layers)
    double attn_ns = 0;         // flash-attention decode, one layer
    double shift_ns = 0;        // K-shift, one layer
    double attn_gbs = 0;        // kv_bytes / attn_ns
    double frac_of_limit = 0;   // attn_gbs / measured read bandwidth
};

}  // namespace kvsim
