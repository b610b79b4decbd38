// KVSIM_CUDA_FA: which flash-attention kernel the CUDA backend runs (cuda_fa_decode.h). Host-only (.cc: the
// error type comes from lib/core/errors.h, which nvcc's host pass cannot compile with fmt 9 in C++20).
#include <cstdlib>
#include <string>

#include "cuda_fa_decode.h"
#include "core/errors.h"

namespace kvsim::cuda {

fa_impl fa_impl_requested() {
    const char * e = std::getenv("KVSIM_CUDA_FA");
    if (!e || !*e) return fa_impl::decode;
    const std::string v = e;
    if (v == "decode") return fa_impl::decode;
    if (v == "legacy") return fa_impl::legacy;
    throw usage_error("environment variable KVSIM_CUDA_FA: '" + v + "' is neither 'decode' nor 'legacy'");
}

}  // namespace kvsim::cuda
