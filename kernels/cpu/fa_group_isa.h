// The per-instruction-set inner loops behind fa_group.h (internal to kernels/cpu): same contracts as fa_group_qk /
// fa_group_pv, each compiled in a file of its own under a target region (isa_target.h). Call only a level that
// cpu_isa_supported() says this CPU has.
#pragma once

#include "cpu/fa_group.h"

namespace kvsim::cpu {

#define KVSIM_FA_GROUP_DECLS                                                                                          \
    void fa_qk(ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt,   \
               int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,          \
               const block_q8_0 * const * qq);                                                                      \
    void fa_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,      \
               size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf,               \
               const int32_t * cells);

namespace avx512 { KVSIM_FA_GROUP_DECLS }  // 4 rows x 4 cells (Q.K), 4 rows x 64 elements (P.V) of 16-lane vectors
namespace avx2 { KVSIM_FA_GROUP_DECLS }    // 4 rows x 2 cells (Q.K), 4 rows x 16 elements (P.V) of 8-lane vectors

// 4 rows x 2 cells (Q.K), 4 rows x 16 elements (P.V) of 4-lane vectors, as avx2 (fa_group_neon.cpp). fa_qk's
// dotprod: the integer Q.K of a q8_0 K uses SDOT (cpu_isa::neon_dotprod) instead of SMULL + SADALP (cpu_isa::neon).
namespace neon {
void fa_qk(bool dotprod, ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride,
           int64_t nt, int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,
           const block_q8_0 * const * qq);
void fa_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
           size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf, const int32_t * cells);
}  // namespace neon

#undef KVSIM_FA_GROUP_DECLS

}  // namespace kvsim::cpu
