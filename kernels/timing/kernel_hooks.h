// The real kernels inside `kvsim replay`: K/V buffers per cache laid out as llama.cpp does,
// the KQ mask built from the cells, flash-attention decode timed on sampled ubatches, the
// K-shift run when shifts are pending, and (--verify) a check of every sampled sequence
// against naive attention over its own cells.
#pragma once

#include "attention.h"
#include "replay/replay_hooks.h"
#include "replay/replay_options.h"

#include <memory>
#include <vector>

namespace kvsim {

// Throws usage_error when the backend cannot be created (unknown name, CUDA not built or no device).
std::unique_ptr<replay_hooks> make_kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> backend);

// The CPU backend's hooks (backend "cpu"); for "cuda" the caller passes make_cuda_backend().
std::unique_ptr<replay_hooks> make_cpu_kernel_hooks(const kernel_options & o);

}  // namespace kvsim
