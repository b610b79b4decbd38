// The machine a kvbench run measures, read from /proc and sysfs: CPU model, cores, GPU, cache sizes. Never throws.
#pragma once

#include "bench/bench_result.h"

#include <cstddef>
#include <string>

namespace kvsim {

// The CPU model, cores, GPU, host, date and source revision (bench/provenance.h) of this run; build_type as given,
// kernel_path left "" for the caller. Reads /proc/cpuinfo ("model name"), std::thread::hardware_concurrency and
// /proc/driver/nvidia/gpus/*/information ("Model"); a value it cannot read stays "" (0 cores).
machine_info collect_machine_info(const std::string & build_type);

// Size of the largest (last-level) CPU cache in bytes from /sys/devices/system/cpu/cpu0/cache (sizes like
// "32768K" or "300M"); 0 when unknown. A VM may report the whole socket's cache.
size_t last_level_cache_bytes();
// Size in bytes of cpu0's largest data or unified cache at `level` (2 = L2, per core on current x86); 0 when unknown.
size_t cpu_cache_bytes(int level);

}  // namespace kvsim
