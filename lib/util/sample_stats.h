// Statistics of measured samples (times, bandwidths, ratios), in the samples' own unit.
#pragma once

#include <vector>

namespace kvsim {

struct sample_stats {
    double min = 0.0;
    double median = 0.0;  // the middle sample; the mean of the two middle ones for an even count
    double max = 0.0;
    int n = 0;            // samples; 0: none (every value 0)
};

sample_stats summarize(std::vector<double> samples);

// summarize(samples).median: 0 for no samples.
double median(std::vector<double> samples);

}  // namespace kvsim
