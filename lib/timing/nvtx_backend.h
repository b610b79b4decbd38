// An attention backend that forwards every call to another one inside an NVTX range of the kvsim domain
// (lib/util/nvtx.h): build_kq_mask / update_kq_mask in `kq_mask` (payload n_kv), flash_attn in `attention`
// (n_kv), k_shift in `k_shift` (cells = kv_size * n_stream). kvbench wraps its CUDA backend in it, so one
// `nsys` or `ncu --nvtx` run names the kernels of each phase (docs/profiling.md). Costs one push and one pop per
// call, no-ops until a tool attaches.
#pragma once

#include "attention.h"

#include <memory>

namespace kvsim {

// Takes ownership of inner (not null).
std::unique_ptr<attn_backend> make_nvtx_backend(std::unique_ptr<attn_backend> inner);

}  // namespace kvsim
