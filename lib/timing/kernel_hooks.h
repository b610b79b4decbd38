// The real kernels inside `kvsim replay`: K/V buffers per cache laid out as llama.cpp does,
// the KQ mask built from the cells, flash-attention decode timed on sampled ubatches, the
// K-shift run when shifts are pending, and (--verify) a check of every sampled sequence
// against naive attention over its own cells. The hooks only compose the parts, each in its own
// file: kv_buffers (K/V buffers and content), step_sampler (which ubatches are timed and verified),
// step_kernels (the kernel calls and their clock, kernel_drive), kernel_account (time and bytes per
// step), step_feedback (--step-time measured), verify (naive check) and kernel_report (summary.json's
// "bandwidth" and the terminal rows).
#pragma once

#include "attention.h"
#include "bandwidth.h"
#include "replay/replay_hooks.h"
#include "replay/replay_options.h"
#include "timing/step_kernels.h"

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

// Throws usage_error when the backend cannot be created (unknown name, CUDA not built or no device).
std::unique_ptr<replay_hooks> make_kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> backend,
                                                limit_probe limit = {}, kernel_drive drive = {});

// The CPU backend's hooks (backend "cpu"); for "cuda" the caller passes make_cuda_backend().
std::unique_ptr<replay_hooks> make_cpu_kernel_hooks(const kernel_options & o);

}  // namespace kvsim
