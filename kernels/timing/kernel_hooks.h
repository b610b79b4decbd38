// The real kernels inside `kvsim replay`: K/V buffers per cache laid out as llama.cpp does,
// the KQ mask built from the cells, flash-attention decode timed on sampled ubatches, the
// K-shift run when shifts are pending, and (--verify) a check of every sampled sequence
// against naive attention over its own cells.
#pragma once

#include "attention.h"
#include "bandwidth.h"
#include "replay/replay_hooks.h"
#include "replay/replay_options.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvsim {

// The memory limit the attention GB/s is compared with, and how to say what it is in reports.
struct limit_probe {
    std::function<bandwidth_result()> measure;   // empty: the CPU read/copy probe (256 MiB, o.threads threads)
    std::string what;                            // e.g. "device-to-device copy"; empty: "read"
};

// How the hooks drive and time a backend; the defaults are the CPU backend's.
struct kernel_drive {
    // Nanoseconds of one group of backend calls (it runs them). Empty: steady_clock around the calls, which must
    // then be synchronous. The CUDA replay passes CUDA events around calls that only enqueue (cuda_event_timer), so
    // launches, host checks and synchronisations are not counted.
    std::function<double(const std::function<void()> &)> time_ns;
    // Between timed steps of the same mask shape and streams, rewrite only the changed cells and rows
    // (attn_backend::update_kq_mask, same bits as a build) instead of building the mask from scratch. llama.cpp
    // builds it every ubatch on the host (set_input_kq_mask), which the CPU replay mirrors.
    bool incremental_mask = false;
};

// Throws usage_error when the backend cannot be created (unknown name, CUDA not built or no device).
std::unique_ptr<replay_hooks> make_kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> backend,
                                                limit_probe limit = {}, kernel_drive drive = {});

// The CPU backend's hooks (backend "cpu"); for "cuda" the caller passes make_cuda_backend().
std::unique_ptr<replay_hooks> make_cpu_kernel_hooks(const kernel_options & o);

}  // namespace kvsim
