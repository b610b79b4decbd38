// CPU backend of the attention interface (kernels/attention.h): std::thread pool, AVX-512/AVX2 loops chosen at
// run time from the CPU's features (cpu/cpu_isa.h), scalar fallback. Tolerances against kernels/reference.h (max abs error of the attention output, |V| < 1 content):
// f32 K/V 2e-5, any f16/q8_0/q4_0 K or V 1e-4 (the kernel dequantizes exactly like the reference, so quantization
// itself adds no error; the gap is float vs double accumulation), the reference given fa_q_dot_type (Q rounded
// through q8_0 for a q8_0 K, as ggml's CPU kernel does). Masks are bit-exact. K-shift: see
// kernels/rope.h and docs/kernels.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention.h"
#include "cpu/cpu_isa.h"
#include "cpu/thread_pool.h"
#include "quant.h"

namespace kvsim {

// Per-thread buffers of the flash-attention kernel, kept across calls so no call allocates (a 128 KiB tile buffer
// would otherwise be mmap'ed and page-faulted on every chunk).
struct fa_thread_scratch {
    std::vector<float> kt, vt;      // K and V tile as f32, [n_head_kv][tile][head_dim]
    std::vector<float> sc, mv;      // scores/probabilities [n_q][tile], mask values [n_tps][tile]
    std::vector<float> slope;       // ALiBi slope per query head
    std::vector<float> m, l;        // online-softmax running max and sum per query row
    std::vector<char> live;         // tile cell attended by at least one token
    std::vector<int32_t> vis;       // grouped path, n_tps > 1: the tile cells token t sees, [n_tps][tile]
    std::vector<int64_t> vis_n;     // their count per token
    int64_t tile = 32;              // cells per tile of the current chunk
    std::vector<const float *> qp;  // grouped path: query row pointers of one KV head's group (dense tokens)
    std::vector<const block_q8_0 *> qqp;  // grouped path, q8_0 K: the same rows' q8_0 blocks (integer Q.K)
    std::vector<float *> ap;        // grouped path: their accumulators
    std::vector<const float *> sq;  // grouped path: the rows of tokens that see the tile sparsely
    std::vector<float *> sa;
    std::vector<int64_t> srows;
    std::vector<int64_t> rows;      // grouped path: their query row index (t * n_head + h)
    std::vector<const float *> mrows;  // grouped path: each row's mask values in the tile
    std::vector<float> mvc;         // grouped path: one token's mask values of its visible cells
    cpu::cpu_isa isa = cpu::cpu_isa::scalar;  // vector loops of the current chunk (cpu_backend::set_isa)
};

class cpu_backend final : public attn_backend {
public:
    // n_threads >= 1: threads used by flash_attn and k_shift (the caller's thread counts as one).
    explicit cpu_backend(int n_threads);

    backend_kind kind() const override { return backend_kind::cpu; }
    void build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) override;
    void update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes,
                        void * dst) override;
    fa_plan plan_flash_attn(const fa_desc & d) const override;
    void flash_attn(const fa_desc & d, const fa_plan & plan, const fa_args & a) override;
    kshift_report k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) override;

    // Largest tile of cells of the flash-attention inner loop (32, 64 or 128 by K/V row size); split-KV chunks
    // are multiples of it.
    static constexpr int64_t fa_tile = 128;

    // Flash attention reads K/V in place per KV head (fa_group.h) where the build and shape allow it (the
    // default); false forces the portable path that converts each tile to f32 first. For tests and kvbench.
    void set_fa_grouped(bool on) { fa_grouped_ = on; }
    // The instruction set of every vector loop of flash_attn (default: cpu_isa_best(), the best this CPU has;
    // cpu_isa.h). Throws std::invalid_argument naming the level when this CPU does not support it. For tests and
    // kvbench (which names the path it ran in its machine line).
    void set_isa(cpu::cpu_isa isa);
    cpu::cpu_isa isa() const { return isa_; }
    // The loops flash_attn runs, for kvbench's machine line: e.g. "avx2, grouped in-place K/V", "avx512+amx
    // (q8_0 K), grouped in-place K/V", "scalar, f32 tile copy".
    std::string path_name() const;
    // Q.K of a q8_0 K on AMX (fa_amx.h) where the CPU and kernel allow it (the default); false runs the AVX-512
    // FMA loops on the same quantized Q. For tests and A/B timing.
    void set_fa_amx(bool on) { fa_amx_ = on; }
    // Q rounded through K's vec_dot_type before Q.K, as ggml's CPU flash attention does (the default: q8_0 for a
    // q8_0 or q4_0 K, whose ggml-cpu type traits both name q8_0); false keeps Q in f32 for every K type (to compare
    // with a backend that does, such as CUDA). An f16 K's vec_dot_type is f16 in ggml, which also accumulates an f16
    // V in f16; kvsim keeps Q and the accumulators in f32 there (tests/tools/fa_vs_ggml.cpp measures the gap).
    void set_fa_quantize_q(bool on) { fa_quantize_q_ = on; }
    ggml_type fa_q_dot_type(ggml_type type_k) const override {
        const bool q8_dot = type_k == ggml_type::q8_0 || type_k == ggml_type::q4_0;
        return fa_quantize_q_ && q8_dot ? ggml_type::q8_0 : ggml_type::f32;
    }

private:
    // Packs fa_qq_ into fa_q_packed_ per (stream, KV head) group for AMX; returns the bytes per group.
    size_t pack_q_for_amx(const fa_desc & d);

    bool fa_grouped_ = true;
    cpu::cpu_isa isa_ = cpu::cpu_isa_best();
    bool fa_amx_ = true;
    bool fa_quantize_q_ = true;
    thread_pool pool_;
    std::vector<float> fa_q_;          // Q after the optional H_k rotation (and rounding through q8_0)
    std::vector<block_q8_0> fa_qq_;    // Q as q8_0 blocks when K's dot type is q8_0
    struct alignas(64) line { char b[64]; };
    std::vector<line> fa_q_packed_;    // fa_qq_ in AMX tile layout per (stream, KV head) group (fa_amx.h)
    std::vector<const block_q8_0 *> fa_q_rows_;  // pack_q_for_amx: one group's rows
    std::vector<fa_thread_scratch> fa_scratch_;  // one per pool thread
    std::vector<float> fa_partial_;    // per (stream, chunk, query row): m, l, acc[head_dim_v]
};

std::unique_ptr<attn_backend> make_cpu_backend(int n_threads);

}  // namespace kvsim
