#include "kv/kv_cache.h"

#include "core/errors.h"

#include "util/nvtx.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <string>

namespace kvsim {

kv_cache::kv_cache(const kv_cache_params & p) : p_(p), n_stream_(p.unified ? 1 : p.n_seq_max) {
    if (p.kv_size == 0) {
        throw lib_invalid_argument("kv_size must be > 0");
    }
    if (p.n_seq_max == 0 || p.n_seq_max > (uint32_t) LLAMA_MAX_SEQ) {
        throw lib_invalid_argument("n_seq_max must be in [1, " + std::to_string(LLAMA_MAX_SEQ) + "], got " +
                                    std::to_string(p.n_seq_max));
    }
    if (p.swa != swa_type::none && p.n_swa == 0) {
        throw lib_invalid_argument("a sliding-window cache needs n_swa > 0");
    }
    cells_.resize(n_stream_);
    for (auto & c : cells_) {
        c.resize(p.kv_size);
    }
    heads_.assign(n_stream_, 0);
}

void kv_cache::check_seq(llama_seq_id s, bool allow_all) const {
    if ((allow_all && s == -1) || (s >= 0 && (uint32_t) s < n_seq_ids())) {
        return;
    }
    // upstream: GGML_ASSERT (abort); we refuse with a message instead
    throw lib_out_of_range("seq_id " + std::to_string(s) + " out of range [0, " + std::to_string(n_seq_ids()) +
                            ") for cache '" + p_.name + "'");
}

void kv_cache::lower_head(uint32_t stream, uint32_t new_head) {
    if (new_head != cells_[stream].size() && new_head < heads_[stream]) {
        heads_[stream] = new_head;
    }
}

void kv_cache::clear() {
    for (uint32_t s = 0; s < n_stream_; ++s) {
        cells_[s].reset();
        heads_[s] = 0;
    }
}

static void normalise_range(llama_pos & p0, llama_pos & p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = std::numeric_limits<llama_pos>::max();
}

bool kv_cache::seq_rm(llama_seq_id seq_id, llama_pos p0, llama_pos p1) {
    check_seq(seq_id, true);
    normalise_range(p0, p1);
    if (seq_id >= 0) {
        const uint32_t st = seq_to_stream(seq_id);
        kv_cells & c = cells_[st];
        uint32_t new_head = c.size();
        for (uint32_t i : c.seq_cells(seq_id, p0, p1)) {
            if (c.seq_rm(i, seq_id)) {
                new_head = std::min(new_head, i);
            }
        }
        lower_head(st, new_head);
        return true;
    }
    for (uint32_t st = 0; st < n_stream_; ++st) {
        kv_cells & c = cells_[st];
        uint32_t new_head = c.size();
        for (uint32_t i = 0; i < c.size(); ++i) {
            if (!c.pos_in(i, p0, p1)) {
                continue;
            }
            c.rm(i);
            if (new_head == c.size()) {
                new_head = i;
            }
        }
        lower_head(st, new_head);
    }
    return true;
}

void kv_cache::seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) {
    check_seq(src, false);
    check_seq(dst, false);
    if (seq_to_stream(src) != seq_to_stream(dst)) {
        seq_cp_cross_stream(src, dst, p0, p1);
        return;
    }
    if (src == dst) {
        return;
    }
    normalise_range(p0, p1);
    kv_cells & c = cells_[seq_to_stream(src)];
    for (uint32_t i : c.seq_cells(src, p0, p1)) {
        c.seq_add(i, dst);
    }
}

void kv_cache::seq_cp_cross_stream(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) {
    const int64_t size = get_size();   // 64 bits: p0 or p1 = INT32_MAX overflowed p + 1
    const bool is_full = !(p0 > 0 && (int64_t) p0 + 1 < size) && !(p1 > 0 && (int64_t) p1 + 1 < size);
    if (!is_full) {
        throw lib_invalid_argument("seq_cp across streams is only supported for full ranges (p0 = " +
                                    std::to_string(p0) + ", p1 = " + std::to_string(p1) + ")");
    }
    const uint32_t s0 = seq_to_stream(src), s1 = seq_to_stream(dst);
    sc_info_.emplace_back(s0, s1);
    kv_cells & from = cells_[s0];
    kv_cells & to = cells_[s1];
    to.reset();
    for (uint32_t i = 0; i < from.size(); ++i) {
        if (!from.seq_has(i, src)) {
            continue;
        }
        // upstream: pos_set(pos - shift), seq_add, then pos_add(shift) when shift != 0: the same position and
        // shift, but through pos - shift, which a seq_div makes negative (pos 3 / 2 = 1 with shift 2: -1, a cell
        // that is empty by its position while it holds a sequence; llama_kv_cells asserts on it in a debug build)
        to.pos_set_shifted(i, from.pos_get(i), from.get_shift(i));
        to.seq_add(i, dst);
    }
    heads_[s1] = heads_[s0];
}

void kv_cache::seq_keep(llama_seq_id seq_id) {
    check_seq(seq_id, false);
    const uint32_t st = seq_to_stream(seq_id);
    kv_cells & c = cells_[st];
    uint32_t new_head = c.size();
    for (uint32_t i = 0; i < c.size(); ++i) {
        if (c.seq_keep(i, seq_id) && new_head == c.size()) {
            new_head = i;
        }
    }
    lower_head(st, new_head);
}

void kv_cache::seq_add(llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta) {
    check_seq(seq_id, false);
    if (delta == 0) {
        return;
    }
    normalise_range(p0, p1);
    if (p0 == p1) {
        return;
    }
    const uint32_t st = seq_to_stream(seq_id);
    kv_cells & c = cells_[st];
    uint32_t new_head = c.size();
    for (uint32_t i : c.seq_cells(seq_id, p0, p1)) {
        if (c.pos_add(i, delta)) {
            new_head = std::min(new_head, i);
        }
    }
    // upstream quirk: when nothing was freed the next search starts from the beginning
    heads_[st] = new_head != c.size() ? new_head : 0;
}

void kv_cache::seq_div(llama_seq_id seq_id, llama_pos p0, llama_pos p1, int d) {
    check_seq(seq_id, false);
    if (d <= 0) {
        throw lib_invalid_argument("seq_div divisor must be > 0, got " + std::to_string(d));
    }
    if (d == 1) {
        return;
    }
    normalise_range(p0, p1);
    if (p0 == p1) {
        return;
    }
    kv_cells & c = cells_[seq_to_stream(seq_id)];
    for (uint32_t i : c.seq_cells(seq_id, p0, p1)) {
        c.pos_div(i, d);
    }
}

llama_pos kv_cache::seq_pos_min(llama_seq_id seq_id) const {
    check_seq(seq_id, false);
    return cells_[seq_to_stream(seq_id)].seq_pos_min(seq_id);
}

llama_pos kv_cache::seq_pos_max(llama_seq_id seq_id) const {
    check_seq(seq_id, false);
    return cells_[seq_to_stream(seq_id)].seq_pos_max(seq_id);
}

bool kv_cache::cell_usable(const kv_cells & c, uint32_t idx) const {
    if (c.is_empty(idx)) {
        return true;
    }
    if (p_.swa == swa_type::none || c.seq_count(idx) != 1) {
        return false;
    }
    const llama_seq_id sc = c.seq_get(idx);
    return is_masked_swa(p_.n_swa, p_.swa, c.pos_get(idx), c.seq_pos_max(sc) + 1);
}

bool kv_cache::find_slot_stream(const kv_cells & c, uint32_t head_cur, uint32_t n_tokens, bool cont,
                                std::vector<uint32_t> & idxs) const {
    const uint32_t size = c.size();
    if (!cont) {
        // first n_tokens usable cells in ring order head_cur, ..., size-1, 0, ..., head_cur-1
        const bool only_empty = p_.swa == swa_type::none;
        for (uint32_t k = 0; k < 2 && idxs.size() < n_tokens; ++k) {
            const uint32_t lo = k == 0 ? head_cur : 0;
            const uint32_t hi = k == 0 ? size : head_cur;
            for (uint32_t i = lo; i < hi && idxs.size() < n_tokens; ++i) {
                if (only_empty) {
                    i = c.next_empty(i);
                    if (i >= hi) break;
                    idxs.push_back(i);
                } else if (cell_usable(c, i)) {
                    idxs.push_back(i);
                }
            }
        }
        return idxs.size() == n_tokens;
    }
    // contiguous: first-fit run of n_tokens usable cells, restarting after a failing cell
    uint32_t n_tested = 0;
    while (true) {
        if (head_cur + n_tokens > size) {
            n_tested += size - head_cur;
            head_cur = 0;
            continue;
        }
        for (uint32_t i = 0; i < n_tokens; ++i) {
            const uint32_t idx = head_cur++;
            ++n_tested;
            if (!cell_usable(c, idx)) break;
            idxs.push_back(idx);
        }
        if (idxs.size() == n_tokens) return true;
        idxs.clear();
        if (n_tested >= size) return false;
    }
}

slot_info kv_cache::find_slot(const ubatch & ub, bool cont) const {
    KVSIM_NVTX_RANGE("find_slot", ub.n_tokens);
    uint32_t n_tokens = ub.n_tokens;
    uint32_t n_seqs = 1;
    if (n_stream_ > 1) {
        n_seqs = ub.n_seqs_unq;
        n_tokens = n_tokens / n_seqs;
    }
    slot_info res;
    res.s0 = LLAMA_MAX_SEQ;
    res.s1 = 0;
    res.strm.resize(n_seqs);
    res.idxs.resize(n_seqs);
    for (uint32_t s = 0; s < n_seqs; ++s) {
        const uint32_t st = seq_to_stream(ub.seq_id_unq[s]);
        res.s0 = std::min(res.s0, st);
        res.s1 = std::max(res.s1, st);
        res.strm[s] = st;
        const kv_cells & c = cells_[st];
        uint32_t head_cur = heads_[st];
        // upstream heuristic: compares an index with a count, not the free space before head
        if (head_cur > c.get_used() + 2 * n_tokens) {
            head_cur = 0;
        }
        if (n_tokens > c.size()) {
            return {};
        }
        res.idxs[s].reserve(n_tokens);
        if (!find_slot_stream(c, head_cur, n_tokens, cont, res.idxs[s])) {
            return {};
        }
    }
    return res;
}

bool kv_cache::restore_seq(llama_seq_id dest, const std::vector<llama_pos> & pos, std::pair<slot_info, ubatch> * placed) {
    if (pos.empty()) return true;
    seq_rm(dest, -1, -1);
    ubatch ub;   // llama_batch_allocr::ubatch_reserve(cell_count, 1)
    ub.equal_seqs = true;
    ub.n_tokens = ub.n_seq_tokens = (uint32_t) pos.size();
    ub.n_seqs = ub.n_seqs_unq = 1;
    ub.pos = pos;
    ub.seq_id.reserve(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) ub.seq_id.push_back({dest});
    ub.seq_id_unq = {dest};
    const slot_info sinfo = find_slot(ub, false);
    if (sinfo.empty()) {
        seq_rm(dest, -1, -1);
        return false;
    }
    apply_ubatch(sinfo, ub);
    if (placed) *placed = {sinfo, std::move(ub)};
    return true;
}

void kv_cache::apply_ubatch(const slot_info & sinfo, const ubatch & ub) {
    KVSIM_NVTX_RANGE("apply_ubatch", ub.n_tokens);
    // highest overwritten position per sequence; only entries of sequences in `overwritten` are set
    std::array<llama_pos, LLAMA_MAX_SEQ> seq_pos_max_rm;
    seq_set overwritten;
    const uint32_t per_stream = sinfo.size();
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        kv_cells & c = cells_[sinfo.strm[s]];
        for (uint32_t ii = 0; ii < per_stream; ++ii) {
            const uint32_t i = s * per_stream + ii;
            const uint32_t idx = sinfo.idxs[s][ii];
            if (!c.is_empty(idx)) {
                const llama_seq_id sc = c.seq_get(idx);
                seq_pos_max_rm[sc] = overwritten.test(sc) ? std::max(seq_pos_max_rm[sc], c.pos_get(idx)) : c.pos_get(idx);
                overwritten.set(sc);
                c.rm(idx);
                ++stats_.swa_reused;
            }
            c.pos_set(idx, ub.pos[i]);
            for (llama_seq_id sid : ub.seq_id[i]) {
                c.seq_add(idx, sid);
            }
        }
    }
    // keep [pos_min, pos_max] of every sequence gap-free: purge what lies below an overwritten cell
    for (size_t si = seq_first(overwritten); si < overwritten.size(); si = seq_next(overwritten, si)) {
        const llama_seq_id s = (llama_seq_id) si;
        const kv_cells & c = cells_[seq_to_stream(s)];
        if (c.seq_pos_min(s) <= seq_pos_max_rm[s]) {
            ++stats_.swa_purged;
            seq_rm(s, c.seq_pos_min(s), seq_pos_max_rm[s] + 1);
        }
    }
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        heads_[sinfo.strm[s]] = sinfo.idxs[s].back() + 1;
    }
}

std::vector<slot_info> kv_cache::prepare(const std::vector<ubatch> & ubatches) {
    KVSIM_NVTX_RANGE("prepare", (int64_t) ubatches.size());
    struct state_t {
        size_t sinfo;                         // index into res (not a copy: this runs for every decode)
        std::vector<uint32_t> heads_old;
        std::vector<kv_cells::snapshot> cells;
    };
    // Without SWA a placement only fills empty cells and has no side effect elsewhere, so the dry
    // run just marks cells used (same find_slot results, far cheaper); with SWA it must really
    // apply the ubatch, whose purge of overwritten sequences survives the rollback upstream.
    const bool dry = p_.swa == swa_type::none;
    if (dry && ubatches.size() == 1) {
        // one ubatch: marking its cells matters to no later find_slot, so only the head restore (with
        // upstream's stream-index quirk below) is left of the dry run
        slot_info sinfo = find_slot(ubatches[0], false);
        if (sinfo.empty()) return {};
        const std::vector<uint32_t> heads_old = heads_;
        for (uint32_t s = 0; s < sinfo.n_stream(); ++s) heads_[sinfo.strm[s]] = heads_old[s];
        std::vector<slot_info> res;
        res.push_back(std::move(sinfo));
        return res;
    }
    std::vector<slot_info> res;
    std::vector<state_t> states;
    res.reserve(ubatches.size());
    states.reserve(ubatches.size());
    bool success = true;
    for (const auto & ub : ubatches) {
        slot_info sinfo = find_slot(ub, false);
        if (sinfo.empty()) {
            success = false;
            break;
        }
        res.push_back(std::move(sinfo));
        const slot_info & si = res.back();
        state_t st{res.size() - 1, heads_, {}};
        for (uint32_t s = 0; s < si.n_stream() && !dry; ++s) {
            st.cells.push_back(cells_[si.strm[s]].cp(si.idxs[s]));
        }
        states.push_back(std::move(st));
        if (dry) {
            for (uint32_t s = 0; s < si.n_stream(); ++s) {
                cells_[si.strm[s]].dry_mark(si.idxs[s]);
                heads_[si.strm[s]] = si.idxs[s].back() + 1;
            }
        } else {
            apply_ubatch(si, ub);
        }
    }
    for (auto it = states.rbegin(); it != states.rend(); ++it) {
        const slot_info & si = res[it->sinfo];
        for (uint32_t s = 0; s < si.n_stream(); ++s) {
            if (dry) {
                cells_[si.strm[s]].dry_unmark(si.idxs[s]);
            } else {
                cells_[si.strm[s]].set(it->cells[s]);
            }
            // upstream restores head of stream strm[s] from the saved head of stream *s*
            // (v_heads_old[s]), not strm[s]; reproduced as is
            heads_[si.strm[s]] = it->heads_old[s];
        }
    }
    if (!success) {
        return {};
    }
    return res;
}

uint32_t kv_cache::get_n_kv(const slot_info & sinfo) const {
    const uint32_t n_pad_cur = std::max(p_.n_pad, 256u);
    uint32_t result = 0;
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        const kv_cells & c = cells_[sinfo.strm[s]];
        const uint32_t padded = (c.used_max_p1() + n_pad_cur - 1) / n_pad_cur * n_pad_cur;
        result = std::max(std::min(c.size(), std::max(n_pad_cur, padded)), result);
    }
    return result;
}

bool kv_cache::get_has_shift() const {
    for (const auto & c : cells_) {
        if (c.get_has_shift()) return true;
    }
    return false;
}

void kv_cache::update() {
    sc_info_.clear();
    for (auto & c : cells_) {
        if (c.get_has_shift()) c.reset_shift();
    }
}

}  // namespace kvsim
