#include "report/cell_map_sampler.h"

#include <algorithm>

namespace kvsim {

namespace {
int16_t cell_state(const kv_cells & cells, uint32_t i) {
    if (cells.is_empty(i)) return CELL_COL_EMPTY;
    return cells.seq_count(i) == 1 ? (int16_t) cells.seq_get(i) : CELL_COL_SHARED;
}

// Most frequent state among a column's cells; a column holds few distinct states, so a small
// linear list beats a map.
int16_t dominant(const std::vector<std::pair<int16_t, uint32_t>> & counts) {
    int16_t best = CELL_COL_EMPTY;
    uint32_t best_n = 0;
    for (const auto & [s, n] : counts) {
        if (n > best_n) {
            best = s;
            best_n = n;
        }
    }
    return best;
}
}  // namespace

cell_map_sampler::cell_map_sampler(const sim_clock & clock, uint32_t max_cols, uint32_t max_rows, uint64_t every)
    : clock_(clock), max_cols_(std::max<uint32_t>(1, max_cols)), max_rows_(std::max<uint32_t>(1, max_rows)),
      every0_(std::max<uint64_t>(1, every)) {}

void cell_map_sampler::on_update(const kv_memory & mem) {
    for (const kv_cache * c : mem.caches()) {
        uint32_t n = 0;
        for (uint32_t st = 0; st < c->get_n_stream(); ++st) n += c->cells(st).n_shifted();
        if (!n) continue;
        uint64_t placed = 0;
        for (const per_cache & pc : state_) placed = pc.cache == c ? pc.n : placed;
        shifts_.push_back({placed, clock_.step(), clock_.now(), c->name(), n});
    }
}

void cell_map_sampler::on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    (void) sinfo; (void) ub; (void) n_kv;
    size_t k = 0;
    while (k < state_.size() && state_[k].cache != &c) ++k;
    if (k == state_.size()) {
        state_.push_back({&c, 0, every0_});
        cell_map m;
        m.cache = c.name();
        m.n_stream = c.get_n_stream();
        m.n_cells = c.get_size() * c.get_n_stream();
        m.cells_per_col = (m.n_cells + max_cols_ - 1) / max_cols_;
        m.n_cols = (m.n_cells + m.cells_per_col - 1) / m.cells_per_col;
        maps_.push_back(std::move(m));
    }
    per_cache & st = state_[k];
    cell_map & m = maps_[k];
    if (st.n++ % st.every != 0) return;
    snapshot(c, m, st.n);
    if (m.rows.size() >= 2 * (size_t) max_rows_) {
        // keep rows 0, 2, 4, ...: they are exactly the multiples of the doubled interval
        size_t w = 0;
        for (size_t r = 0; r < m.rows.size(); r += 2) m.rows[w++] = std::move(m.rows[r]);
        m.rows.resize(w);
        st.every *= 2;
    }
}

void cell_map_sampler::snapshot(const kv_cache & c, cell_map & m, uint64_t n) const {
    cell_map_row row;
    row.ubatch = n;
    row.step = clock_.step();
    row.sim_time = clock_.now();
    row.cols.reserve(m.n_cols);
    std::vector<std::pair<int16_t, uint32_t>> counts;
    uint32_t in_col = 0;
    for (uint32_t st = 0; st < c.get_n_stream(); ++st) {
        const kv_cells & cells = c.cells(st);
        for (uint32_t i = 0; i < cells.size(); ++i) {
            const int16_t s = cell_state(cells, i);
            auto it = std::find_if(counts.begin(), counts.end(), [s](const auto & p) { return p.first == s; });
            if (it == counts.end()) counts.emplace_back(s, 1);
            else ++it->second;
            if (++in_col == m.cells_per_col) {
                row.cols.push_back(dominant(counts));
                counts.clear();
                in_col = 0;
            }
        }
    }
    if (in_col) row.cols.push_back(dominant(counts));
    m.rows.push_back(std::move(row));
}

}  // namespace kvsim
