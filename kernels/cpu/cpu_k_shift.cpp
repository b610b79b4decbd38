// K-shift on the CPU (llama-kv-cache.cpp: build_graph_shift / build_rope_shift, ggml_rope_ext_inplace).
#include <algorithm>
#include <climits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/kshift_isa.h"
#include "cpu/simd.h"
#include "quant.h"
#include "core/errors.h"

namespace kvsim {

kshift_report cpu_backend::k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) {
    kshift_report rep = begin_kshift(d, k);
    const bool quant = ggml_is_quantized(k.type);
    const bool rot = quant && d.rot.k();
    const int64_t n = k.head_dim * k.n_head_kv;
    float corr[2];
    rope_yarn_corr_dims(d.rope.n_rot, d.rope.n_ctx_orig, d.rope.freq_base, d.rope.beta_fast, d.rope.beta_slow, corr);

    // AVX2 (and AVX-512 CPUs, which have it): the whole row in 8-lane vectors (kshift_avx2.cpp); else (NEON too)
    // portable
    [[maybe_unused]] const bool vec = (isa_ == cpu::cpu_isa::avx2 || isa_ == cpu::cpu_isa::avx512) && cpu::kshift_vector_ok(k.type, k.head_dim, d.rope, rot ? d.rot.n_k : 0);
    constexpr int64_t block = 256;
    pool_.parallel_for((rep.cells + block - 1) / block, [&](int64_t b, int) {
        std::vector<float> row((size_t) n), cache((size_t) d.rope.n_rot), tab((size_t) cpu::kshift_table_size(d.rope.n_rot));
        int64_t cached_pos = INT64_MIN;
        const int64_t c1 = std::min(rep.cells, (b + 1) * block);
        for (int64_t c = b * block; c < c1; ++c) {
            if (shift[c] != cached_pos) {  // a context shift: one delta for every cell
                rope_cache_init(d.rope, shift[c], corr, cache.data());
                KVSIM_X86_ONLY(if (vec) cpu::avx2::kshift_tables(d.rope, cache.data(), tab.data());)
                cached_pos = shift[c];
            }
            void * r = k.row(0, c);
#if KVSIM_X86
            if (vec) {
                cpu::avx2::kshift_row(k.type, r, k.n_head_kv, k.head_dim, d.rope, tab.data(), rot ? d.rot.n_k : 0, row.data());
                continue;
            }
#endif
            float * x = k.type == ggml_type::f32 ? static_cast<float *>(r) : row.data();
            if (k.type != ggml_type::f32) cpu::row_to_f32_fast(k.type, r, x, n, isa_);
            if (rot) fwht_blocks(x, n, d.rot.n_k);
            for (int64_t h = 0; h < k.n_head_kv; ++h) rope_rotate(d.rope, cache.data(), x + h * k.head_dim);
            if (rot) fwht_blocks(x, n, d.rot.n_k);
            if (k.type != ggml_type::f32) row_from_f32(k.type, x, r, n);
        }
    });
    return rep;
}

}  // namespace kvsim
