#include "kv/batch_allocr.h"

#include "kv/memory.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

bool batch_allocr::validate_positions(const kv_memory & mem, std::string * err) {
    for (size_t s = seq_first(seq_unq_); s < seq_unq_.size(); s = seq_next(seq_unq_, s)) {
        const seq_pos_stat & st = sp_[s];
        const llama_pos p0 = mem.seq_pos_max((llama_seq_id) s);
        if (p0 >= 0 && st.min != p0 + 1) {
            *err = fmt::format("the tokens of sequence {} in the input batch have inconsistent sequence positions: "
                               "X = {} (last in memory), Y = {} (first in batch), Y = X + 1 required", s, p0, st.min);
            return false;
        }
        int64_t n_distinct = st.count;
        if (!st.consecutive) {
            std::vector<llama_pos> u;
            for (uint32_t i = 0; i < batch_.n_tokens(); ++i) {
                for (llama_seq_id q : batch_.seq_id[i]) {
                    if (q == (llama_seq_id) s) u.push_back(batch_.pos[i]);
                }
            }
            std::sort(u.begin(), u.end());
            n_distinct = std::unique(u.begin(), u.end()) - u.begin();
        }
        if ((int64_t) st.max - st.min + 1 > n_distinct) {
            *err = fmt::format("sequence {} positions are not continuous", s);
            return false;
        }
    }
    return true;
}

bool batch_allocr::check_coupled(const kv_memory & mem, std::string * err) const {
    for (size_t s1 = seq_first(seq_unq_); s1 < seq_unq_.size(); s1 = seq_next(seq_unq_, s1)) {
        const seq_set & c = sp_[s1].cpl;
        for (size_t s0 = seq_first(c); s0 < c.size(); s0 = seq_next(c, s0)) {
            if (mem.seq_pos_min((llama_seq_id) s0) != mem.seq_pos_min((llama_seq_id) s1) ||
                mem.seq_pos_max((llama_seq_id) s0) != mem.seq_pos_max((llama_seq_id) s1)) {
                *err = fmt::format("sequence {} is coupled to {} in the input batch, but have diverged", s1, s0);
                return false;
            }
        }
    }
    return true;
}

bool batch_allocr::check_sets_and_order(std::string * err) {
    // no partial sequence subsets, no decreasing positions
    if (!has_cpl_) {
        if (first_decreasing_ >= 0) {
            *err = fmt::format("sequence {} positions are decreasing (not allowed)", first_decreasing_);
            return false;
        }
        return true;
    }
    build_sets();
    for (size_t s = seq_first(seq_unq_); s < seq_unq_.size(); s = seq_next(seq_unq_, s)) {
        sp_[s].cur_set.set();
        sp_[s].cur_pos = -1;
    }
    for (uint32_t i = 0; i < batch_.n_tokens(); ++i) {
        for (llama_seq_id s : batch_.seq_id[i]) {
            seq_pos_stat & st = sp_[s];
            st.cur_set &= seq_set_[i];
            if (st.cur_set.none()) {
                *err = fmt::format("sequence {} belongs to incompatible sequence sets (not allowed)", s);
                return false;
            }
            if (batch_.pos[i] < st.cur_pos) {
                *err = fmt::format("sequence {} positions are decreasing (not allowed)", s);
                return false;
            }
            st.cur_pos = batch_.pos[i];
        }
    }
    return true;
}

bool batch_allocr::init(const llama_batch_in & batch, const kv_memory & mem, uint32_t n_seq_max, std::string * err) {
    batch_ = batch;
    n_seq_max_ = n_seq_max;
    has_cpl_ = false;
    sets_built_ = false;
    first_decreasing_ = -1;
    seq_unq_.reset();
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
    for (uint32_t i = 0; i < batch.n_tokens(); ++i) {
        const auto ids = batch.seq_id[i];
        const llama_pos p = batch.pos[i];
        for (size_t k = 0; k < ids.size(); ++k) {
            const llama_seq_id s1 = ids[k];
            seq_pos_stat & st = sp_[s1];
            if (!seq_unq_.test(s1)) {
                seq_unq_.set(s1);
                st = seq_pos_stat{p, p, 0, true, p, {}, {}, -1};
                if (p < -1 && first_decreasing_ < 0) {
                    first_decreasing_ = s1;   // the order rule starts from position -1
                }
            } else {
                if (p < st.last && first_decreasing_ < 0) {
                    first_decreasing_ = s1;
                }
                st.consecutive = st.consecutive && p == st.last + 1;
                st.min = std::min(st.min, p);
                st.max = std::max(st.max, p);
            }
            st.last = p;
            ++st.count;
            if (k > 0) {
                st.cpl.set(ids[0]);
                has_cpl_ = true;
            }
        }
    }
    if (!validate_positions(mem, err) || (has_cpl_ && !check_coupled(mem, err)) || !check_sets_and_order(err)) {
        return false;
    }
    split_reset();
    return true;
}

void batch_allocr::build_sets() {
    if (sets_built_) {
        return;
    }
    sets_built_ = true;
    seq_set_.clear();
    seq_set_map_.clear();
    seq_set_.reserve(get_n_tokens());
    std::vector<int32_t> * last_list = nullptr;
    seq_set last_set;
    for (uint32_t i = 0; i < get_n_tokens(); ++i) {
        seq_set cur;
        for (llama_seq_id s : batch_.seq_id[i]) {
            cur.set(s);
        }
        seq_set_.push_back(cur);
        // consecutive tokens nearly always share their sequence set: skip the 256-bit hash then
        if (!last_list || cur != last_set) {
            last_list = &seq_set_map_[cur];
            last_set = cur;
        }
        last_list->push_back((int32_t) i);
    }
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
    // split_simple takes the next n_ubatch unused tokens, which are always consecutive: copy the range
    const uint32_t end = std::min<uint32_t>((uint32_t) used_.size(), cur + std::max<uint32_t>(n_ubatch, 1));
    for (uint32_t i = cur; i < end; ++i) used_[i] = true;
    n_used_ += end - cur;
    ubatch ub;
    ub.equal_seqs = false;
    ub.n_tokens = end - cur;
    ub.n_seqs = ub.n_tokens;
    ub.n_seq_tokens = 1;
    ub.pos.assign(batch_.pos.begin() + cur, batch_.pos.begin() + end);
    ub.seq_id.reserve(ub.n_tokens);
    seq_set unq;
    for (uint32_t i = cur; i < end; ++i) {
        const auto ids = batch_.seq_id[i];
        ub.seq_id.push_back(ids);
        for (llama_seq_id s : ids) unq.set(s);
    }
    for (size_t s = seq_first(unq); s < unq.size() && s < n_seq_max_; s = seq_next(unq, s)) {
        ub.seq_id_unq.push_back((llama_seq_id) s);
    }
    ub.n_seqs_unq = (uint32_t) ub.seq_id_unq.size();
    return ub;
}

ubatch batch_allocr::split_equal(uint32_t n_ubatch, bool sequential) {
    if (sequential && has_cpl_) {
        // upstream: "sequential split is not supported when there are coupled sequences (you may need -kvu)"
        return {};
    }
    build_sets();
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
        const auto ids = batch_.seq_id[i];
        ub.seq_id.push_back(ids);
        for (llama_seq_id s : ids) {
            unq.set(s);
        }
    }
    for (size_t s = seq_first(unq); s < unq.size() && s < n_seq_max_; s = seq_next(unq, s)) {
        ub.seq_id_unq.push_back((llama_seq_id) s);
    }
    ub.n_seqs_unq = (uint32_t) ub.seq_id_unq.size();
    return ub;
}

}  // namespace kvsim
