#include "kv/cells.h"

#include <bit>
#include <cassert>

namespace kvsim {

void kv_cells::resize(uint32_t n) {
    pos_.assign(n, -1);
    shift_.assign(n, 0);
    seq_.assign(n, seq_set{});
    empty_bits_.assign((n + 63) / 64, 0);
    seq_pos_.assign(LLAMA_MAX_SEQ, seq_index{});
    reset();
}

void kv_cells::reset() {
    const uint32_t n = size();
    std::fill(pos_.begin(), pos_.end(), -1);
    std::fill(shift_.begin(), shift_.end(), 0);
    std::fill(seq_.begin(), seq_.end(), seq_set{});
    std::fill(empty_bits_.begin(), empty_bits_.end(), ~uint64_t(0));
    if (n % 64 != 0) {
        empty_bits_.back() = (uint64_t(1) << (n % 64)) - 1;
    }
    for (auto & m : seq_pos_) {
        m.clear();
    }
    n_used_ = 0;
    used_hi_ = 0;
    n_shifted_ = 0;
    has_shift_ = false;
}

void kv_cells::reset_shift() {
    has_shift_ = false;
    std::fill(shift_.begin(), shift_.end(), 0);
    n_shifted_ = 0;
}

std::pair<uint32_t, uint32_t> kv_cells::free_runs() const {
    uint32_t runs = 0, longest = 0, cur = 0;
    for (size_t w = 0; w < empty_bits_.size(); ++w) {
        uint64_t x = empty_bits_[w];
        if (x == ~uint64_t(0)) {
            runs += cur == 0;
            cur += 64;
            continue;
        }
        for (uint32_t b = 0; b < 64;) {
            if ((x >> b) & 1) {
                const uint32_t n = (uint32_t) std::countr_one(x >> b);
                runs += cur == 0;
                cur += n;
                b += n;
            } else {
                longest = std::max(longest, cur);
                cur = 0;
                if (b == 63) break;
                const uint64_t rest = x >> (b + 1);
                if (rest == 0) break;
                b += 1 + (uint32_t) std::countr_zero(rest);
            }
        }
        if (!((x >> 63) & 1)) {
            longest = std::max(longest, cur);
            cur = 0;
        }
    }
    return {runs, std::max(longest, cur)};
}

uint32_t kv_cells::used_max_p1() const {
    if (n_used_ == 0) {
        used_hi_ = 0;
        return 0;
    }
    while (used_hi_ > 0 && pos_[used_hi_ - 1] == -1) {
        --used_hi_;
    }
    return used_hi_;
}

void kv_cells::mark_used(uint32_t i) {
    empty_bits_[i / 64] &= ~(uint64_t(1) << (i % 64));
    ++n_used_;
    if (i + 1 > used_hi_) {
        used_hi_ = i + 1;
    }
}

void kv_cells::mark_free(uint32_t i) {
    empty_bits_[i / 64] |= uint64_t(1) << (i % 64);
    --n_used_;
}

uint32_t kv_cells::next_empty(uint32_t from) const {
    const uint32_t n = size();
    if (from >= n) {
        return n;
    }
    uint32_t w = from / 64;
    uint64_t bits = empty_bits_[w] & (~uint64_t(0) << (from % 64));
    while (bits == 0) {
        if (++w >= empty_bits_.size()) {
            return n;
        }
        bits = empty_bits_[w];
    }
    return w * 64 + (uint32_t) std::countr_zero(bits);
}

void kv_cells::seq_pos_inc(llama_seq_id s, uint32_t i) {
    seq_pos_[s].insert({pos_[i], i});
}

void kv_cells::seq_pos_dec(llama_seq_id s, uint32_t i) {
    seq_pos_[s].erase({pos_[i], i});
}

std::vector<uint32_t> kv_cells::seq_cells(llama_seq_id s, llama_pos p0, llama_pos p1) const {
    std::vector<uint32_t> out;
    seq_pos_[s].cells_in(p0, p1, out);
    return out;
}

void kv_cells::seq_pos_add_cell(uint32_t i) {
    const seq_set & b = seq_[i];
    for (size_t s = seq_first(b); s < b.size(); s = seq_next(b, s)) {
        seq_pos_inc((llama_seq_id) s, i);
    }
}

void kv_cells::seq_pos_rm_cell(uint32_t i) {
    const seq_set & b = seq_[i];
    for (size_t s = seq_first(b); s < b.size(); s = seq_next(b, s)) {
        seq_pos_dec((llama_seq_id) s, i);
    }
}

kv_cells::snapshot kv_cells::cp(const std::vector<uint32_t> & idxs) const {
    snapshot s;
    s.idxs = idxs;
    s.pos.reserve(idxs.size());
    s.seq.reserve(idxs.size());
    for (uint32_t i : idxs) {
        s.pos.push_back(pos_[i]);
        s.seq.push_back(seq_[i]);
    }
    return s;
}

void kv_cells::set(const snapshot & s) {
    for (size_t j = 0; j < s.idxs.size(); ++j) {
        const uint32_t i = s.idxs[j];
        if (pos_[i] == -1 && s.pos[j] != -1) {
            mark_used(i);
        }
        if (pos_[i] != -1 && s.pos[j] == -1) {
            mark_free(i);
        }
        if (pos_[i] != -1) {
            seq_pos_rm_cell(i);
        }
        pos_[i] = s.pos[j];
        seq_[i] = s.seq[j];
        if (pos_[i] != -1) {
            seq_pos_add_cell(i);
        }
    }
}

void kv_cells::dry_mark(const std::vector<uint32_t> & idxs) {
    for (uint32_t i : idxs) {
        assert(pos_[i] == -1);
        pos_[i] = 0;
        mark_used(i);
    }
}

void kv_cells::dry_unmark(const std::vector<uint32_t> & idxs) {
    for (uint32_t i : idxs) {
        pos_[i] = -1;
        mark_free(i);
    }
}

void kv_cells::rm(uint32_t i) {
    assert(pos_[i] != -1);
    seq_pos_rm_cell(i);
    seq_[i].reset();
    pos_[i] = -1;
    set_shift(i, 0);
    mark_free(i);
}

bool kv_cells::seq_rm(uint32_t i, llama_seq_id s) {
    assert(seq_[i].test(s) && pos_[i] != -1);
    seq_pos_dec(s, i);
    seq_[i].reset(s);
    if (seq_[i].none()) {
        pos_[i] = -1;
        set_shift(i, 0);
        mark_free(i);
        return true;
    }
    return false;
}

bool kv_cells::seq_keep(uint32_t i, llama_seq_id s) {
    if (seq_[i].test(s)) {
        seq_pos_rm_cell(i);
        seq_[i].reset();
        seq_[i].set(s);
        seq_pos_inc(s, i);
        return false;
    }
    if (seq_[i].any()) {
        seq_pos_rm_cell(i);
        seq_[i].reset();
        pos_[i] = -1;
        set_shift(i, 0);
        mark_free(i);
        return true;
    }
    return false;
}

void kv_cells::seq_add(uint32_t i, llama_seq_id s) {
    assert(pos_[i] != -1);
    if (seq_[i].test(s)) {
        return;
    }
    seq_[i].set(s);
    seq_pos_inc(s, i);
}

llama_seq_id kv_cells::seq_get(uint32_t i) const {
    assert(seq_[i].count() == 1);
    return (llama_seq_id) seq_first(seq_[i]);
}

llama_pos kv_cells::seq_pos_min(llama_seq_id s) const {
    return seq_pos_[s].pos_min();
}

llama_pos kv_cells::seq_pos_max(llama_seq_id s) const {
    return seq_pos_[s].pos_max();
}

void kv_cells::pos_set(uint32_t i, llama_pos p) {
    assert(pos_[i] == -1 && seq_[i].none());
    pos_[i] = p;
    mark_used(i);
}

void kv_cells::pos_set_shifted(uint32_t i, llama_pos p, llama_pos shift) {
    pos_set(i, p);
    if (shift != 0) {
        set_shift(i, shift);
        has_shift_ = true;
    }
}

bool kv_cells::pos_add(uint32_t i, llama_pos d) {
    assert(pos_[i] != -1);
    const pos_shift r = pos_add_result(i, d);
    seq_pos_rm_cell(i);
    pos_[i] = (llama_pos) r.pos;
    set_shift(i, (llama_pos) r.shift);
    has_shift_ = true;
    if (pos_[i] < 0) {
        seq_[i].reset();
        pos_[i] = -1;
        set_shift(i, 0);
        mark_free(i);
        return true;
    }
    seq_pos_add_cell(i);
    return false;
}

void kv_cells::pos_div(uint32_t i, int d) {
    const pos_shift r = pos_div_result(i, d);
    seq_pos_rm_cell(i);
    pos_[i] = (llama_pos) r.pos;
    set_shift(i, (llama_pos) r.shift);
    seq_pos_add_cell(i);
    has_shift_ = true;
}

}  // namespace kvsim
