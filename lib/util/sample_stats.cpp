#include "util/sample_stats.h"

#include <algorithm>
#include <utility>

namespace kvsim {

sample_stats summarize(std::vector<double> s) {
    sample_stats t;
    if (s.empty()) return t;
    std::sort(s.begin(), s.end());
    const size_t h = s.size() / 2;
    t.n = (int) s.size();
    t.min = s.front();
    t.max = s.back();
    t.median = s.size() % 2 ? s[h] : 0.5 * (s[h - 1] + s[h]);
    return t;
}

double median(std::vector<double> samples) { return summarize(std::move(samples)).median; }

}  // namespace kvsim
