// This machine's physical memory and the share of it one run may plan to use: the one rule behind
// kvsim replay's and kvbench sweep's refusals of runs that would not fit.
#pragma once

#include <cstddef>

namespace kvsim {

// Physical memory of this machine (sysconf pages x page size), 0 when unknown.
size_t physical_memory_bytes();

// The share of physical memory one run may plan to use for its buffers: 80 % (beyond it a run ends
// in bad_alloc or the OOM killer, and the machine swaps first).
size_t memory_budget_bytes(size_t phys_bytes);

}  // namespace kvsim
