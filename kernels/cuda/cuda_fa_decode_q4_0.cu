// Instantiations of the decode flash-attention kernel for K = V = q4_0 (one translation unit per type, so the
// build compiles types in parallel). Kernel: cuda_fa_decode.cuh.
#include "cuda_fa_decode.cuh"

namespace kvsim::cuda {

fa_decode_kernel_info fa_decode_info_q4_0(int d, int r) { return fa_decode::kernel_info_for<fa_decode::kv_t_q4_0>(d, r); }

}  // namespace kvsim::cuda
