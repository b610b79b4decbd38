// Reduce-scatter of R per-lane partial sums over the G lanes of one cell's lane group, shared by the decode
// flash-attention kernel (cuda_fa_decode.cuh, where shfl is __shfl_xor_sync) and a host test that runs the same
// code on 32 threads in lock-step (tests/test_cuda_split.cpp). Plain C++ when not compiled by nvcc.
//
// Step with xor distance O halves the rows a lane keeps (lanes with bit O of `part` set keep the upper half and
// send the lower half to their partner), so after log2(R) steps each lane holds one row's partial sum over 2^steps
// lanes; the remaining log2(G/R) butterflies finish it. Cost: R-1 + log2(G/R) shuffles instead of R*log2(G) for R
// separate butterflies. Result: the lane of part p holds in v[0] the sum over the group of row p >> (log2 G -
// log2 R), identical (bit for bit) on every lane of that row. R and G powers of two, R <= G <= 32; every lane of
// the warp must call it (the shuffles exchange across the whole warp).
#pragma once

#if defined(__CUDACC__)
#define KVSIM_FA_HD __host__ __device__ __forceinline__
#else
#define KVSIM_FA_HD inline
#endif
#if defined(__CUDA_ARCH__)  // the device pass only: the host compiler warns on an unknown pragma
#define KVSIM_FA_UNROLL _Pragma("unroll")
#else
#define KVSIM_FA_UNROLL
#endif

namespace kvsim::cuda {

// Call as fa_reduce_scatter<R, G / 2, R>(v, part, shfl) with shfl(x, o) = x of the lane whose part is part ^ o.
template <int N, int O, int R, class Shfl>
KVSIM_FA_HD void fa_reduce_scatter(float (&v)[R], int part, Shfl && shfl) {
    if constexpr (N > 1) {
        constexpr int H = N / 2;
        const bool up = (part & O) != 0;
        KVSIM_FA_UNROLL
        for (int k = 0; k < H; ++k) {
            const float send = up ? v[k] : v[k + H];
            const float keep = up ? v[k + H] : v[k];
            v[k] = keep + shfl(send, O);
        }
        fa_reduce_scatter<H, O / 2, R>(v, part, shfl);
    } else if constexpr (O >= 1) {
        v[0] += shfl(v[0], O);
        fa_reduce_scatter<1, O / 2, R>(v, part, shfl);
    }
}

}  // namespace kvsim::cuda
