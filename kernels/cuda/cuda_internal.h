// Launchers shared between the CUDA backend's translation units (kernels/cuda/*.cu). Internal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "attention.h"

namespace kvsim::cuda {

// Throw std::runtime_error "what: <CUDA error string>" unless e == cudaSuccess.
inline void check(cudaError_t e, const char * what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Query rows (token x query head of one GQA group) one flash-attention block handles: 1, 2, 4 or 8.
int fa_rows_per_block(const fa_desc & d);
// Throws std::invalid_argument for shapes this backend does not instantiate (head dims other than 64/128/256,
// head_dim_k != head_dim_v).
void fa_check_cuda_shape(const fa_desc & d);
// Enqueue the chunk kernel and the merge kernel. q: device Q (rotated already when d.rot.n_k);
// part: device scratch of n_stream*plan.n_chunks*n_head*n_tps*(head_dim_v + 2) floats.
void fa_launch(const fa_desc & d, const fa_plan & plan, const fa_args & a, const float * q, float * part, cudaStream_t st);
// dst = src with every row of head_dim rotated by H_n block-wise (rows: number of rows).
void rotate_q_launch(const float * src, float * dst, int64_t rows, int64_t head_dim, int n, cudaStream_t st);

// Device copy of one mask call's metadata: per stream, cell positions [n_kv], seq-set words [n_kv][8] (bit b of
// seq id 32w+b), token positions/seq ids [n_tps]; and for updates the previous token positions/seq ids.
struct mask_meta_dev {
    const int32_t * cell_pos;   // [n_stream][n_kv]
    const uint32_t * cell_seq;  // [n_stream][n_kv][8]
    const int32_t * tok_pos;    // [n_stream][n_tps]
    const int32_t * tok_seq;    // [n_stream][n_tps]
    const int32_t * prev_pos;   // [n_stream][n_tps] (updates only)
    const int32_t * prev_seq;   // [n_stream][n_tps] (updates only)
};

// Full build of dst from m (all n_stream*n_tps*n_kv values).
void mask_build_launch(const kq_mask_desc & d, const mask_meta_dev & m, void * dst, cudaStream_t st);
// Incremental update: rows whose token seq changed (or ALiBi) rebuilt; other rows rewrite the cells whose
// causal/SWA decision flips between prev_pos and tok_pos; then the n_changed cells listed per stream
// (changed: [n_stream][max_changed], n_changed: [n_stream]) are rewritten in every row.
void mask_update_launch(const kq_mask_desc & d, const mask_meta_dev & m, const uint32_t * changed, const int32_t * n_changed,
                        int max_changed, void * dst, cudaStream_t st);
// Scatter changed cells' metadata into the device mirror: for stream s, k < n_changed[s]: cell changed[s][k] gets
// pos[s][k] and seq words[s][k][8].
void mask_scatter_launch(int64_t n_stream, int64_t n_kv, const uint32_t * changed, const int32_t * n_changed, int max_changed,
                         const int32_t * pos, const uint32_t * seqw, int32_t * cell_pos, uint32_t * cell_seq, cudaStream_t st);

// K-shift of every cell of k in place (see attn_backend::k_shift). shift: device [kv_size*n_stream];
// freq_factors: device [n_rot/2] or nullptr; rot_n: H_k block size applied around RoPE (0 = none).
void kshift_launch(const kshift_desc & d, const kv_tensor & k, const int32_t * shift, const float * freq_factors, int rot_n,
                   cudaStream_t st);

// Read bytes of buf (16-byte aligned, from cudaMalloc) with a grid of 4 blocks per SM: the L2 flush of the timing
// helpers, after their memset. sink: device scratch for one unsigned (written only on an impossible sum).
void l2_flush_read_launch(const void * buf, size_t bytes, unsigned * sink, int sm_count, cudaStream_t st);

}  // namespace kvsim::cuda
