// Downsampled history of the cell map of every cache (who holds which cell, over time) and of
// the K-shifts applied, for the heat strip of report.html. Not in llama.cpp: a reporting aid.
#pragma once

#include "kv/context.h"
#include "time/sim_clock.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

// State of one column of cells: an empty column, the one sequence holding most of its cells,
// or cells held by several sequences at once (seq_cp sharing).
constexpr int16_t CELL_COL_EMPTY = -1;
constexpr int16_t CELL_COL_SHARED = -2;

// One snapshot of a cache: cols[i] = dominant state of cells [i * cells_per_col, (i + 1) * cells_per_col)
// of the cache's streams laid end to end (stream 0 first): CELL_COL_EMPTY, CELL_COL_SHARED or a
// seq id >= 0. Dominant = most cells in that state; ties go to the state seen first.
struct cell_map_row {
    uint64_t ubatch = 0;    // ubatches placed in this cache so far, including this one
    uint64_t step = 0;      // scheduler step / op number at the snapshot
    double sim_time = 0;    // simulated seconds at the snapshot
    std::vector<int16_t> cols;
};

struct cell_map {
    std::string cache;             // kv | base | swa
    uint32_t n_cells = 0;          // kv_size * n_stream
    uint32_t n_stream = 1;
    uint32_t cells_per_col = 1;
    uint32_t n_cols = 0;           // ceil(n_cells / cells_per_col) <= max_cols
    std::vector<cell_map_row> rows;
};

// A K-shift about to be applied (llama_context::memory_update with pending shifts).
struct k_shift_event {
    uint64_t ubatch = 0;    // ubatches placed in this cache before the shift
    uint64_t step = 0;
    double sim_time = 0;
    std::string cache;
    uint32_t cells = 0;     // cells with a non-zero pending shift, all streams
};

// Observer snapshotting each cache every `every` of its ubatches. The interval adapts: when a
// cache holds 2 * max_rows rows, every other row is dropped and the interval doubles, so a
// replay of any length keeps between max_rows and 2 * max_rows rows per cache and takes
// O(max_rows * log(ubatches)) snapshots in all, each visiting the cells below used_max_p1 once.
// The clock's step and time are read at each snapshot, as occupancy_recorder does.
class cell_map_sampler : public decode_observer {
public:
    // max_cols >= 1 columns per row, max_rows >= 1; every >= 1 initial interval in ubatches.
    explicit cell_map_sampler(const sim_clock & clock, uint32_t max_cols = 512, uint32_t max_rows = 400, uint64_t every = 1);

    void on_update(const kv_memory & mem) override;
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override;

    // One map per cache, in the order the caches first placed a ubatch (base before swa).
    const std::vector<cell_map> & maps() const { return maps_; }
    const std::vector<k_shift_event> & k_shifts() const { return shifts_; }
    uint32_t max_rows() const { return max_rows_; }

private:
    struct per_cache {
        const kv_cache * cache = nullptr;
        uint64_t n = 0;
        uint64_t every = 1;
    };
    void snapshot(const kv_cache & c, cell_map & m, uint64_t n) const;

    const sim_clock & clock_;
    uint32_t max_cols_, max_rows_;
    uint64_t every0_;
    std::vector<per_cache> state_;
    std::vector<cell_map> maps_;
    std::vector<k_shift_event> shifts_;
};

}  // namespace kvsim
