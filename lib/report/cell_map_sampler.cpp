#include "report/cell_map_sampler.h"

#include <algorithm>

namespace kvsim {

namespace {
int16_t cell_state(const kv_cells & cells, uint32_t i) {
    if (cells.is_empty(i)) return CELL_COL_EMPTY;
    return cells.seq_count(i) == 1 ? (int16_t) cells.seq_get(i) : CELL_COL_SHARED;
}

// The cells of one column, counted per state in the order the states were first seen. A column
// holds few distinct states, so a small linear list beats a map; cells come in runs of one state,
// so the list is searched once per run rather than once per cell.
class column_tally {
public:
    void add(int16_t s, uint32_t n) {
        for (auto & [state, count] : counts_) {
            if (state == s) {
                count += n;
                return;
            }
        }
        counts_.emplace_back(s, n);
    }
    // The most frequent state (ties: the one seen first); empties the tally for the next column.
    int16_t take_dominant() {
        int16_t best = CELL_COL_EMPTY;
        uint32_t best_n = 0;
        for (const auto & [s, n] : counts_) {
            if (n > best_n) {
                best = s;
                best_n = n;
            }
        }
        counts_.clear();
        return best;
    }

private:
    std::vector<std::pair<int16_t, uint32_t>> counts_;
};
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

// Cells are fed to the columns as runs of one state: the occupied part of a stream cell by cell
// (a run goes on while the next cell holds the same sequence set), the empty tail past
// used_max_p1 as one run, so a mostly empty cache costs about one step per column.
void cell_map_sampler::snapshot(const kv_cache & c, cell_map & m, uint64_t n) const {
    cell_map_row row;
    row.ubatch = n;
    row.step = clock_.step();
    row.sim_time = clock_.now();
    row.cols.reserve(m.n_cols);
    column_tally tally;
    uint32_t in_col = 0;   // cells of the current column seen so far
    auto feed = [&](int16_t s, uint32_t n_cells) {
        while (n_cells) {
            const uint32_t k = std::min(n_cells, m.cells_per_col - in_col);
            tally.add(s, k);
            in_col += k;
            n_cells -= k;
            if (in_col == m.cells_per_col) {
                row.cols.push_back(tally.take_dominant());
                in_col = 0;
            }
        }
    };
    for (uint32_t st = 0; st < c.get_n_stream(); ++st) {
        const kv_cells & cells = c.cells(st);
        const std::vector<llama_pos> & pos = cells.pos();
        const std::vector<seq_set> & seq = cells.seq();
        const uint32_t used = cells.used_max_p1();
        for (uint32_t i = 0; i < used;) {
            uint32_t j = i + 1;
            if (pos[i] == -1) {
                while (j < used && pos[j] == -1) ++j;
            } else {
                while (j < used && pos[j] != -1 && seq[j] == seq[i]) ++j;
            }
            feed(cell_state(cells, i), j - i);
            i = j;
        }
        feed(CELL_COL_EMPTY, cells.size() - used);
    }
    if (in_col) row.cols.push_back(tally.take_dominant());
    m.rows.push_back(std::move(row));
}

}  // namespace kvsim
