#include "cpu/fa_group.h"

#include "cpu/fa_group_isa.h"

namespace kvsim::cpu {

bool fa_group_supported(cpu_isa isa, ggml_type tk, ggml_type tv, int64_t head_dim_k, int64_t head_dim_v) {
    const auto ok = [](ggml_type t) {
        return t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::q8_0 || t == ggml_type::q4_0;
    };
    return isa != cpu_isa::scalar && cpu_isa_supported(isa) && ok(tk) && ok(tv) && head_dim_k % 16 == 0 &&
           head_dim_v % 16 == 0 && head_dim_k > 0 && head_dim_v > 0;
}

#if KVSIM_X86 || KVSIM_ARM
void fa_group_qk(cpu_isa isa, ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride,
                 int64_t nt, int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,
                 const block_q8_0 * const * qq) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::fa_qk(tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf, cells, qq);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::fa_qk(tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf, cells, qq);)
    KVSIM_ARM_ONLY(return neon::fa_qk(isa == cpu_isa::neon_dotprod, tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf,
                                      cells, qq);)
}

void fa_group_pv([[maybe_unused]] cpu_isa isa, ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows,
                 const char * v0, size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf,
                 const int32_t * cells) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::fa_pv(tv, acc, p, ld, n_rows, v0, stride, nt, head_dim_v, live, pf, cells);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::fa_pv(tv, acc, p, ld, n_rows, v0, stride, nt, head_dim_v, live, pf, cells);)
    KVSIM_ARM_ONLY(return neon::fa_pv(tv, acc, p, ld, n_rows, v0, stride, nt, head_dim_v, live, pf, cells);)
}
#else
// Never called without vector loops: fa_group_supported() is false there.
void fa_group_qk(cpu_isa, ggml_type, const float * const *, int64_t, const char *, size_t, int64_t, int64_t, float *,
                 int64_t, prefetch_stream &, const int32_t *, const block_q8_0 * const *) {}
void fa_group_pv(cpu_isa, ggml_type, float * const *, const float *, int64_t, int64_t, const char *, size_t, int64_t,
                 int64_t, const char *, prefetch_stream &, const int32_t *) {}
#endif

int64_t fa_group_steps(cpu_isa isa, int64_t n_rows, int64_t nt, int64_t head_dim_k, int64_t head_dim_v, bool qk_amx) {
    const int64_t row_blocks = (n_rows + 3) / 4;
    if (isa == cpu_isa::avx2 || isa >= cpu_isa::neon) {  // Q.K: one per 2 cells x 32 elements; P.V: one per cell of each 16-element column
        return row_blocks * ((nt + 1) / 2 * ((head_dim_k + 31) / 32) + head_dim_v / 16 * nt);
    }
    const int64_t e_blocks = head_dim_v / 64 + (head_dim_v % 64) / 16;
    const int64_t qk = qk_amx ? nt / 16 * (head_dim_k / 32) + (nt % 16 + 3) / 4 * (head_dim_k / 16)
                              : (nt + 3) / 4 * (head_dim_k / 16);
    return row_blocks * (qk + e_blocks * nt);
}

}  // namespace kvsim::cpu
