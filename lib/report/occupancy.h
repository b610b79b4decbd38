// Occupancy of the cache over a replay: one row per placed ubatch (sampled), plus peaks.
// Written as occupancy.csv (columns documented in docs/reports.md).
#pragma once

#include "kv/context.h"
#include "time/sim_clock.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

struct occupancy_row {
    uint64_t ubatch = 0;          // running ubatch number (per cache placement)
    uint64_t step = 0;            // scheduler step (update_slots iteration) or op number
    double sim_time = 0;          // simulated seconds at the start of the step
    std::string cache;            // kv | base | swa
    uint32_t tokens = 0;          // tokens in the ubatch
    uint32_t used = 0;            // non-empty cells, all streams
    uint32_t n_kv = 0;            // cells the attention reads
    uint32_t head = 0;            // ring head of the ubatch's first stream after placement
    uint32_t free_runs = 0;       // maximal runs of empty cells below kv_size, all streams
    uint32_t largest_free_run = 0;
    uint32_t active_seqs = 0;     // sequences holding at least one cell
    uint64_t swa_reused = 0;      // cumulative SWA-masked cells overwritten
    uint32_t shifted_cells = 0;   // cells with a pending K-shift
    uint64_t slot_failures = 0;   // cumulative llama_decode returns of 1
};

struct occupancy_peaks {
    uint32_t used = 0;
    uint32_t n_kv = 0;
    uint64_t ubatches = 0;
};

// Observer recording a row every `every` ubatches (every >= 1) and peaks on every ubatch.
// The clock's step and time and `failures` (the count of decode calls without a slot; null: none)
// are read at each placement.
class occupancy_recorder : public decode_observer {
public:
    occupancy_recorder(uint64_t every, const sim_clock & clock, const uint64_t * failures);

    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override;

    const std::vector<occupancy_row> & rows() const { return rows_; }
    const occupancy_peaks & peaks() const { return peaks_; }
    // CSV with a header line; time with microsecond resolution.
    void write_csv(std::ostream & out) const;

private:
    occupancy_row measure(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const;

    uint64_t every_;
    const sim_clock & clock_;
    const uint64_t * failures_;
    uint64_t n_ = 0;
    occupancy_peaks peaks_;
    std::vector<occupancy_row> rows_;
};

}  // namespace kvsim
