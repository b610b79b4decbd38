// kvbench merge: shard outputs joined into one run, after checking that they belong together.
#pragma once

#include "bench/bench_result.h"

#include <string>
#include <vector>

namespace kvsim {

// Join shard outputs into one run (shard 0/1, points sorted by plan index). names[i] labels parts[i] in errors
// (its kvbench.json path; "input i+1" when missing). Throws usage_error naming the input and the value when the
// inputs are empty, describe different sweeps (same_sweep), have different shard counts, repeat or miss a shard,
// hold no points, hold a point that is not the sweep plan's point of the file's shard (index out of range, another
// shard's index, other ctx/type/batch), miss points without being flagged interrupted, or contain the same point
// twice. Interrupted shards are merged and flagged interrupted.
sweep_output merge_outputs(const std::vector<sweep_output> & parts, const std::vector<std::string> & names = {});

}  // namespace kvsim
