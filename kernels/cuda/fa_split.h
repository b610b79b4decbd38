// Split-KV planner of the CUDA decode flash-attention kernel (kernels/cuda/cuda_fa_decode.cu): how many chunks
// each stream's n_kv cells are cut into so the grid fills whole waves of resident blocks. Plain C++ (no CUDA
// headers) so it is unit-tested without a GPU (tests/test_cuda_split.cpp); the CUDA side only supplies
// blocks_per_sm from cudaOccupancyMaxActiveBlocksPerMultiprocessor and the device's SM count.
//
// Idea from llama.cpp ggml/src/ggml-cuda/fattn-common.cuh: launch_fattn (parallel_blocks search over wave
// efficiency, stopping once >= 95 % and more waves would be needed); the code here is our own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace kvsim::cuda {

struct fa_split_input {
    int64_t base_blocks = 0;  // blocks per chunk index: n_stream * n_head_kv * query-row groups (> 0)
    int64_t n_kv = 0;         // cells per stream (> 0)
    int64_t blocks_per_sm = 0;  // resident blocks per SM of the chunk kernel (occupancy query, > 0)
    int64_t sm_count = 0;     // multiprocessors (> 0)
    int64_t tile = 64;        // cells per pipeline tile: chunks are whole tiles (> 0)
    int64_t min_chunk = 256;  // smallest chunk in cells worth a block (its prologue and merge are fixed costs)
};

struct fa_split {
    int64_t chunk = 0;     // cells per chunk, a multiple of tile
    int64_t n_chunks = 0;  // ceil(n_kv / chunk)
    int64_t waves = 0;     // ceil(base_blocks * n_chunks / (blocks_per_sm * sm_count))
    double efficiency = 0;  // base_blocks * n_chunks / (waves * blocks_per_sm * sm_count), in (0, 1]
};

// Wave efficiency of `blocks` blocks on `per_wave` resident slots: the fraction of the slot-time of the whole
// waves that does work (1 = the last wave is full).
inline double fa_wave_efficiency(int64_t blocks, int64_t per_wave, int64_t * waves_out = nullptr) {
    const int64_t waves = (blocks + per_wave - 1) / per_wave;
    if (waves_out) *waves_out = waves;
    return (double) blocks / (double) (waves * per_wave);
}

// Chunks per stream: the count in [n_lo, n_hi] with the best wave efficiency, where n_lo fills about one wave
// (or 1) and n_hi keeps chunks >= min_chunk cells (and >= 1 tile). The search walks upwards from n_lo and stops
// once an efficiency >= 0.95 was found and more waves would be needed (more chunks only add merge work then);
// ties keep the smaller count. Chunks are whole tiles, so the count is recomputed from the rounded chunk.
// Throws std::invalid_argument for a non-positive field.
inline fa_split plan_fa_split(const fa_split_input & in) {
    if (in.base_blocks <= 0 || in.n_kv <= 0 || in.blocks_per_sm <= 0 || in.sm_count <= 0 || in.tile <= 0 || in.min_chunk < 0) {
        throw std::invalid_argument("plan_fa_split: non-positive shape or device figure");
    }
    const int64_t per_wave = in.blocks_per_sm * in.sm_count;
    const int64_t n_tiles = (in.n_kv + in.tile - 1) / in.tile;
    const int64_t min_tiles = std::max<int64_t>(1, (in.min_chunk + in.tile - 1) / in.tile);
    const int64_t n_hi = std::max<int64_t>(1, n_tiles / min_tiles);
    const int64_t n_lo = std::clamp<int64_t>(per_wave / in.base_blocks, 1, n_hi);
    int64_t best_n = n_lo, best_waves = 0;
    double best_eff = -1.0;
    for (int64_t n = n_lo; n <= n_hi; ++n) {
        // the count actually launched once chunks are rounded to whole tiles
        const int64_t chunk_tiles = (n_tiles + n - 1) / n;
        const int64_t n_real = (n_tiles + chunk_tiles - 1) / chunk_tiles;
        int64_t waves = 0;
        const double eff = fa_wave_efficiency(in.base_blocks * n_real, per_wave, &waves);
        if (best_eff >= 0.95 && waves > best_waves) break;
        if (eff > best_eff + 1e-12) {
            best_eff = eff;
            best_n = n;
            best_waves = waves;
        }
    }
    fa_split s;
    const int64_t chunk_tiles = (n_tiles + best_n - 1) / best_n;
    s.chunk = chunk_tiles * in.tile;
    s.n_chunks = (in.n_kv + s.chunk - 1) / s.chunk;
    s.efficiency = fa_wave_efficiency(in.base_blocks * s.n_chunks, per_wave, &s.waves);
    return s;
}

}  // namespace kvsim::cuda
