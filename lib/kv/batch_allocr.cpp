#include "kv/batch_allocr.h"

#include "kv/memory.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

namespace {
struct seq_pos_stat {
    llama_pos min = -1;
    llama_pos max = -1;
    std::vector<llama_pos> all;   // to count distinct positions
};

bool validate_positions(const std::vector<seq_pos_stat> & sp, const kv_memory & mem, uint32_t n_seq_max, std::string * err) {
    for (uint32_t s = 0; s < n_seq_max; ++s) {
        if (sp[s].all.empty()) {
            continue;
        }
        const llama_pos p0 = mem.seq_pos_max((llama_seq_id) s);
        if (p0 >= 0 && sp[s].min != p0 + 1) {
            *err = fmt::format("the tokens of sequence {} in the input batch have inconsistent sequence positions: "
                               "X = {} (last in memory), Y = {} (first in batch), Y = X + 1 required", s, p0, sp[s].min);
            return false;
        }
        std::vector<llama_pos> u = sp[s].all;
        std::sort(u.begin(), u.end());
        const auto n_distinct = std::unique(u.begin(), u.end()) - u.begin();
        if (sp[s].max - sp[s].min + 1 > n_distinct) {
            *err = fmt::format("sequence {} positions are not continuous", s);
            return false;
        }
    }
    return true;
}
}  // namespace

bool batch_allocr::init(const llama_batch_in & batch, const kv_memory & mem, uint32_t n_seq_max, std::string * err) {
    batch_ = batch;
    n_seq_max_ = n_seq_max;
    has_cpl_ = false;
    seq_set_.clear();
    seq_set_map_.clear();
    if (batch.n_tokens() == 0) {
        *err = "n_tokens == 0";
        return false;
    }
    for (uint32_t i = 0; i < batch.n_tokens(); ++i) {
        for (llama_seq_id s : batch.seq_id[i]) {
            if (s < 0 || s >= (llama_seq_id) n_seq_max) {
                *err = fmt::format("invalid seq_id[{}] = {} >= {}", i, s, n_seq_max);
                return false;
            }
        }
    }
    std::vector<seq_pos_stat> sp(n_seq_max);
    std::vector<seq_set> cpl(n_seq_max);   // cpl[s1] has s0: s1 coupled to s0
    for (uint32_t i = 0; i < batch.n_tokens(); ++i) {
        const llama_seq_id s0 = batch.seq_id[i][0];
        seq_set cur;
        for (size_t k = 0; k < batch.seq_id[i].size(); ++k) {
            const llama_seq_id s1 = batch.seq_id[i][k];
            auto & st = sp[s1];
            st.min = st.all.empty() ? batch.pos[i] : std::min(st.min, batch.pos[i]);
            st.max = st.all.empty() ? batch.pos[i] : std::max(st.max, batch.pos[i]);
            st.all.push_back(batch.pos[i]);
            if (k > 0) {
                cpl[s1].set(s0);
                has_cpl_ = true;
            }
            cur.set(s1);
        }
        seq_set_.push_back(cur);
        seq_set_map_[cur].push_back((int32_t) i);
    }
    if (!validate_positions(sp, mem, n_seq_max, err)) {
        return false;
    }
    for (uint32_t s1 = 0; s1 < n_seq_max && has_cpl_; ++s1) {
        for (size_t s0 = cpl[s1]._Find_first(); s0 < cpl[s1].size(); s0 = cpl[s1]._Find_next(s0)) {
            if (mem.seq_pos_min((llama_seq_id) s0) != mem.seq_pos_min((llama_seq_id) s1) ||
                mem.seq_pos_max((llama_seq_id) s0) != mem.seq_pos_max((llama_seq_id) s1)) {
                *err = fmt::format("sequence {} is coupled to {} in the input batch, but have diverged", s1, s0);
                return false;
            }
        }
    }
    // no partial sequence subsets, no decreasing positions
    std::vector<seq_set> cur_set(n_seq_max, seq_set{}.set());
    std::vector<llama_pos> cur_pos(n_seq_max, -1);
    for (uint32_t i = 0; i < batch.n_tokens(); ++i) {
        for (llama_seq_id s : batch.seq_id[i]) {
            cur_set[s] &= seq_set_[i];
            if (cur_set[s].none()) {
                *err = fmt::format("sequence {} belongs to incompatible sequence sets (not allowed)", s);
                return false;
            }
            if (batch.pos[i] < cur_pos[s]) {
                *err = fmt::format("sequence {} positions are decreasing (not allowed)", s);
                return false;
            }
            cur_pos[s] = batch.pos[i];
        }
    }
    split_reset();
    return true;
}

void batch_allocr::split_reset() {
    n_used_ = 0;
    used_.assign(get_n_tokens(), false);
}

ubatch batch_allocr::split_simple(uint32_t n_ubatch) {
    uint32_t cur = 0;
    while (cur < used_.size() && used_[cur]) {
        ++cur;
    }
    if (cur >= used_.size()) {
        return {};
    }
    std::vector<int32_t> idxs;
    while (true) {
        idxs.push_back((int32_t) cur);
        used_[cur] = true;
        ++n_used_;
        ++cur;
        if (cur >= used_.size() || idxs.size() >= n_ubatch) {
            break;
        }
    }
    return ubatch_add(idxs, (uint32_t) idxs.size(), false);
}

ubatch batch_allocr::split_equal(uint32_t n_ubatch, bool sequential) {
    if (sequential && has_cpl_) {
        // upstream: "sequential split is not supported when there are coupled sequences (you may need -kvu)"
        return {};
    }
    std::vector<seq_set> cur_sets;
    llama_seq_id last_seq_id = -1;
    for (uint32_t i = 0; i < get_n_tokens(); ++i) {
        if (used_[i]) {
            continue;
        }
        bool add = true;
        for (const auto & cs : cur_sets) {
            if ((cs & seq_set_[i]).any()) {
                add = false;
                break;
            }
        }
        if (sequential) {
            add = add && (cur_sets.empty() || batch_.seq_id[i][0] == last_seq_id + 1);
        }
        if (add) {
            cur_sets.push_back(seq_set_[i]);
            last_seq_id = batch_.seq_id[i][0];
            if (cur_sets.size() > n_ubatch) {
                break;
            }
        }
    }
    const uint32_t n_seqs = (uint32_t) cur_sets.size();
    if (n_seqs == 0) {
        return {};
    }
    std::vector<size_t> cur_idx(n_seqs, 0);
    for (uint32_t s = 0; s < n_seqs; ++s) {
        const auto & list = seq_set_map_.at(cur_sets[s]);
        while (used_[list[cur_idx[s]]]) {
            ++cur_idx[s];
        }
    }
    std::vector<std::vector<int32_t>> per_set(n_seqs);
    while (true) {
        bool can_expand = true;
        for (uint32_t s = 0; s < n_seqs; ++s) {
            if (cur_idx[s] >= seq_set_map_.at(cur_sets[s]).size()) {
                can_expand = false;
                break;
            }
        }
        if (!can_expand) {
            break;
        }
        for (uint32_t s = 0; s < n_seqs; ++s) {
            const int32_t idx = seq_set_map_.at(cur_sets[s])[cur_idx[s]];
            per_set[s].push_back(idx);
            used_[idx] = true;
            ++n_used_;
            ++cur_idx[s];
        }
        if ((per_set[0].size() + 1) * n_seqs > n_ubatch) {
            break;
        }
    }
    std::vector<int32_t> idxs;
    for (const auto & v : per_set) {
        idxs.insert(idxs.end(), v.begin(), v.end());
    }
    return ubatch_add(idxs, n_seqs, true);
}

ubatch batch_allocr::ubatch_add(const std::vector<int32_t> & idxs, uint32_t n_seqs, bool equal_seqs) const {
    ubatch ub;
    ub.equal_seqs = equal_seqs;
    ub.n_tokens = (uint32_t) idxs.size();
    ub.n_seqs = n_seqs;
    ub.n_seq_tokens = ub.n_tokens / n_seqs;
    ub.pos.reserve(idxs.size());
    ub.seq_id.reserve(idxs.size());
    seq_set unq;
    for (int32_t i : idxs) {
        ub.pos.push_back(batch_.pos[i]);
        ub.seq_id.push_back(batch_.seq_id[i]);
        unq |= seq_set_[i];
    }
    for (size_t s = unq._Find_first(); s < unq.size() && s < n_seq_max_; s = unq._Find_next(s)) {
        ub.seq_id_unq.push_back((llama_seq_id) s);
    }
    ub.n_seqs_unq = (uint32_t) ub.seq_id_unq.size();
    return ub;
}

}  // namespace kvsim
