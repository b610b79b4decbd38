// Instantiations of the decode flash-attention kernel for K = V = f16 (one translation unit per type, so the
// build compiles types in parallel). Kernel: cuda_fa_decode.cuh.
#include "cuda_fa_decode.cuh"

namespace kvsim::cuda {

fa_decode_kernel_info fa_decode_info_f16(int d, int r) { return fa_decode::kernel_info_for<fa_decode::kv_t_f16>(d, r); }

}  // namespace kvsim::cuda
