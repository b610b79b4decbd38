#include "kv/memory_breakdown.h"

#include <algorithm>

namespace kvsim {

size_t compute_buffer_bytes(const model_shape & m, const context_params & p, const context_sizes & s) {
    if (m.n_embd == 0 || m.n_ff == 0 || m.n_vocab == 0) return 0;
    const double t = std::min(s.n_ctx, s.n_ubatch);   // sched_reserve's n_tokens; n_outputs = t (n_ubatch <= n_batch)
    const double f32 = 4, e = m.n_embd;
    const double mask = (double) (s.kv_size + s.swa_size) * t * (p.flash_attn ? 2 : 4);
    const double output = t * ((double) m.n_vocab + 2 * e) * f32;
    const double ffn = mask + t * (3.0 * m.n_ff + 4 * e) * f32;
    const double attn = p.flash_attn ? 0 : mask + t * ((double) s.kv_size * m.n_head + 5 * e + 2.0 * m.n_embd_k_gqa()) * f32;
    return (size_t) std::max({output, ffn, attn});
}

size_t output_buffer_bytes(const model_shape & m, const context_params & p) {
    return (size_t) m.n_vocab * sizeof(float) * p.n_seq_max;
}

memory_breakdown compute_memory_breakdown(const model_shape & m, const context_params & p, const context_sizes & s,
                                          double weight_bytes, int64_t cache_ram_mib) {
    memory_breakdown b;
    b.model = (size_t) weight_bytes;
    b.context = compute_kv_bytes(m, p, s).total();
    b.compute = compute_buffer_bytes(m, p, s);
    b.output = output_buffer_bytes(m, p);
    b.cache_ram = cache_ram_mib < 0 ? -1 : cache_ram_mib * (int64_t(1) << 20);
    return b;
}

}  // namespace kvsim
