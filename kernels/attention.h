// Backend-neutral interface of the three attention kernels kvsim times: KQ mask build, flash-attention decode
// (short prefill chunks too) and K-shift. The CPU backend (kernels/cpu/) and the CUDA backend (kernels/cuda/)
// implement attn_backend; naive references live in kernels/reference.h. Pointers are host memory for the CPU
// backend and device memory for CUDA (metadata arrays of the mask are always host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hadamard.h"
#include "core/types.h"
#include "kv_tensor.h"
#include "rope.h"

namespace kvsim {

enum class backend_kind { cpu, cuda };

// ---- KQ mask (llama-kv-cache.cpp: set_input_kq_mask / set_input_kq_mask_impl) ----

// Shape of the mask [n_kv, n_tps, 1, n_stream] (contiguous; element (cell j, token i, stream s) at
// (s*n_tps + i)*n_kv + j), values 0 (attend) or -INF, with ALiBi -|p0 - p1| instead of 0.
// type: f16 when flash attention is on, f32 otherwise.
struct kq_mask_desc {
    int64_t n_kv = 0;      // cells attended per stream
    int64_t n_tps = 0;     // ubatch tokens per stream (n_tokens / n_stream)
    int64_t n_stream = 1;  // streams in the ubatch
    bool causal = true;    // causal_attn (after the LLAMA_NON_CAUSAL_TYPE_SWA_ONLY adjustment)
    uint32_t n_swa = 0;
    swa_type swa = swa_type::none;
    bool alibi = false;  // hparams.use_alibi
    ggml_type type = ggml_type::f16;
};

// One stream's inputs: the cell metadata of the stream the tokens map to, and the ubatch tokens of that stream.
struct kq_mask_stream {
    const llama_pos * cell_pos = nullptr;     // [>= n_kv], -1 = empty cell
    const seq_set * cell_seq = nullptr;       // [>= n_kv]
    const llama_pos * tok_pos = nullptr;      // [n_tps]
    const llama_seq_id * tok_seq = nullptr;   // [n_tps], first seq id of each token
};

// What changed in one stream since the mask in dst was built (same kq_mask_desc).
struct kq_mask_change {
    std::vector<uint32_t> cells;             // cells (< n_kv) whose pos or seq set changed
    std::vector<llama_pos> prev_tok_pos;     // [n_tps] token positions of the previous build
    std::vector<llama_seq_id> prev_tok_seq;  // [n_tps] token seq ids of the previous build
};

// ---- flash attention (ggml.h: ggml_flash_attn_ext + llama-graph.cpp build_attn_mha) ----

struct fa_desc {
    int64_t head_dim_k = 128;
    int64_t head_dim_v = 128;
    int64_t n_head = 32;    // query heads; n_head % n_head_kv == 0 (GQA ratio n_head/n_head_kv)
    int64_t n_head_kv = 8;
    int64_t n_kv = 0;       // cells attended per stream, [0, n_kv) of each stream
    int64_t n_tps = 1;      // query tokens per stream (1 = decode)
    int64_t n_stream = 1;
    float scale = 1.0f;     // kq_scale
    float max_bias = 0.0f;  // ALiBi; > 0 requires a mask
    float softcap = 0.0f;   // logit softcap; 0 = off: s = softcap*tanh(q.k*scale/softcap)
    attn_rot rot;           // n_k: Q rotated by H_k before; n_v: output rotated by H_v after (§5.4)
};

struct fa_args {
    const float * q = nullptr;  // [head_dim_k, n_head, n_tps, n_stream] f32 (RoPE'd, not yet Hadamard-rotated)
    kv_tensor k;                // the layer's K cache; streams [stream0, stream0 + n_stream) are used
    kv_tensor v;                // the layer's V cache, same cells
    int64_t stream0 = 0;
    const void * mask = nullptr;  // [n_kv, n_tps, 1, n_stream] of mask_type (f16/f32), nullptr = no mask
    ggml_type mask_type = ggml_type::f16;
    float * out = nullptr;  // [head_dim_v, n_head, n_tps, n_stream] f32
};

// Work partition (FlashInfer-style plan): each stream is split into n_chunks chunks of `chunk` cells.
struct fa_plan {
    int64_t chunk = 0;     // cells per split-KV chunk (multiple of the tile size)
    int64_t n_chunks = 0;  // chunks per stream
    int n_threads = 1;
};

// ---- K-shift (llama-kv-cache.cpp: build_graph_shift / build_rope_shift) ----

// What to do when K is quantized and not Hadamard-rotated: upstream (2026) dereferences a null rotation tensor
// and crashes (semantics doc §5.3 item 4, PR #25636).
enum class null_rot_policy {
    refuse,  // throw kvsim::usage_error naming the hazard
    plain,   // dequantize -> RoPE -> requantize (the pre-April-2026 path) and report the hazard
};

struct kshift_desc {
    rope_params rope;  // rope.n_rot dims at the start of each head are rotated
    attn_rot rot;      // rot.n_k: K blocks are un-rotated before and re-rotated after RoPE (quantized K only)
    null_rot_policy on_null_rot = null_rot_policy::refuse;
};

struct kshift_report {
    int64_t cells = 0;                   // cells processed (kv_size * n_stream: every cell, shift 0 included)
    bool null_rotation_hazard = false;   // quantized K without rotation: upstream would crash here
};

class attn_backend {
public:
    virtual ~attn_backend() = default;
    virtual backend_kind kind() const = 0;

    // Full mask build. streams: [d.n_stream]. dst: d.n_kv*d.n_tps*d.n_stream elements of d.type.
    // Throws std::invalid_argument for a bad desc (type not f16/f32, non-positive sizes, null inputs).
    virtual void build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) = 0;
    // Incremental rebuild after a decode step: dst holds the mask built for the previous tokens with the same d;
    // rewrites only the rows/cells that can differ. Result bit-equal to build_kq_mask. changes: [d.n_stream].
    virtual void update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes,
                                void * dst) = 0;

    // Cheap work partition for a flash_attn call with this shape. Throws std::invalid_argument for a bad desc.
    virtual fa_plan plan_flash_attn(const fa_desc & d) const = 0;
    // out = softmax(scale*q.K^T [softcap] + slope*mask) V per (stream, token, head), head h reading kv head
    // h / (n_head/n_head_kv). Rows with every cell masked give zeros. Throws std::invalid_argument on shape/type
    // mismatch (types f32/f16/q8_0/q4_0, head dims multiple of 32, max_bias > 0 without mask).
    virtual void flash_attn(const fa_desc & d, const fa_plan & plan, const fa_args & a) = 0;
    // Type Q is rounded through before its dot products with a K of type type_k (ggml: the K type's
    // vec_dot_type); f32 = not rounded. Pass it to ref_flash_attn to compare like with like.
    virtual ggml_type fa_q_dot_type(ggml_type type_k) const {
        (void) type_k;
        return ggml_type::f32;
    }

    // Rotate the first rope.n_rot dims of every head of every cell of k in place by RoPE at position shift[i]
    // (shift: [kv_size * n_stream], cell i of stream s at s*kv_size + i). Quantized K: dequantize, undo H_k,
    // RoPE, redo H_k, requantize. Throws kvsim::usage_error for the null-rotation hazard under
    // null_rot_policy::refuse, std::invalid_argument for bad sizes.
    virtual kshift_report k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) = 0;

    // Memory the kernels above read and write (K/V, Q, mask, output, shift): host memory for
    // the CPU backend (these defaults), device memory for CUDA. alloc'd blocks are 64-byte
    // aligned and freed when the last shared_ptr goes. Copies are synchronous, sizes in bytes.
    virtual std::shared_ptr<void> alloc(size_t bytes);
    virtual void upload(void * dst, const void * host_src, size_t bytes);
    virtual void download(void * host_dst, const void * src, size_t bytes);
    virtual void copy(void * dst, const void * src, size_t bytes);   // both backend memory
};

// ALiBi slope of query head h (ggml: m0^(h+1) for h < n_head_log2, else m1^(2(h-n_head_log2)+1)); 1 if max_bias == 0.
float alibi_slope(int64_t h, int64_t n_head, float max_bias);

// Validation shared by backends; each throws std::invalid_argument with the reason.
void check_kq_mask_desc(const kq_mask_desc & d, const kq_mask_stream * streams);
void check_fa(const fa_desc & d, const fa_args & a);
void check_kshift(const kshift_desc & d, const kv_tensor & k);
// check_kshift, then the report every backend returns: cells processed and the null-rotation
// hazard (quantized K without Hadamard rotation), refused with usage_error under
// null_rot_policy::refuse. Shared so that the CPU and CUDA backends judge the hazard alike.
kshift_report begin_kshift(const kshift_desc & d, const kv_tensor & k);

}  // namespace kvsim
