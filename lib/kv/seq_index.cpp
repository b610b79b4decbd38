#include "kv/seq_index.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace kvsim {

void seq_index::clear() {
    keys_.clear();
    head_ = 0;
    ins_.clear();
    era_.clear();
}

bool seq_index::empty() const {
    fold();
    return live() == 0;
}

size_t seq_index::size() const {
    fold();
    return live();
}

void seq_index::insert_slow(key k) {
    if (!dirty()) {
        if (live() == 0) {
            keys_.clear();
            head_ = 0;
            keys_.push_back(k);
            return;
        }
        if (keys_.back() < k) {
            keys_.push_back(k);
            return;
        }
        if (head_ > 0 && k < keys_[head_]) {
            keys_[--head_] = k;
            return;
        }
    }
    ins_.push_back(k);
}

void seq_index::erase_slow(key k) {
    if (!dirty() && live() > 0) {
        if (keys_.back() == k) {
            keys_.pop_back();
            return;
        }
        if (keys_[head_] == k) {
            // compact once the erased front outgrows the live part: amortised O(1) per erase
            if (++head_ * 2 > keys_.size() && head_ >= 64) {
                keys_.erase(keys_.begin(), keys_.begin() + (std::ptrdiff_t) head_);
                head_ = 0;
            }
            return;
        }
    }
    era_.push_back(k);
}

void seq_index::fold() const {
    if (!dirty()) {
        return;
    }
    std::sort(ins_.begin(), ins_.end());
    std::sort(era_.begin(), era_.end());
    tmp_.clear();
    tmp_.reserve(live() + ins_.size());
    std::merge(keys_.begin() + (std::ptrdiff_t) head_, keys_.end(), ins_.begin(), ins_.end(), std::back_inserter(tmp_));
    keys_.clear();
    head_ = 0;
    std::set_difference(tmp_.begin(), tmp_.end(), era_.begin(), era_.end(), std::back_inserter(keys_));
    assert(keys_.size() + era_.size() == tmp_.size());                          // every erased key was present
    assert(std::adjacent_find(keys_.begin(), keys_.end()) == keys_.end());      // no key inserted twice
    ins_.clear();
    era_.clear();
}

llama_pos seq_index::pos_min() const {
    fold();
    return live() == 0 ? -1 : keys_[head_].first;
}

llama_pos seq_index::pos_max() const {
    fold();
    return live() == 0 ? -1 : keys_.back().first;
}

void seq_index::cells_in(llama_pos p0, llama_pos p1, std::vector<uint32_t> & out) const {
    fold();
    auto it = std::lower_bound(keys_.begin() + (std::ptrdiff_t) head_, keys_.end(), key{p0, 0});
    for (; it != keys_.end() && it->first < p1; ++it) {
        out.push_back(it->second);
    }
}

}  // namespace kvsim
