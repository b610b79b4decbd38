// Dense Eigen baseline of decode attention for kvbench: per (stream, kv head) S = scale*Q_g K^T (GEMM), row
// softmax, O = P V, on K/V already converted to f32. No mask (kvbench points attend every cell), no tiling, no
// split-KV: the plain BLAS-style computation a flash-attention kernel should beat.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"

namespace kvsim {

struct eigen_attn_shape {
    int64_t head_dim = 128;
    int64_t n_head = 32;
    int64_t n_head_kv = 8;
    int64_t n_kv = 0;      // cells per stream
    int64_t n_stream = 1;  // one decoded token per stream
    float scale = 1.0f;
};

// q: [head_dim, n_head, 1, n_stream] f32; k, v: [head_dim, n_head_kv, n_kv, n_stream] f32 (kv_tensor layout of an
// f32 cache); out: [head_dim, n_head, 1, n_stream] f32. Query head h reads kv head h / (n_head/n_head_kv).
// (stream, kv head) pairs are spread over pool; scratch is resized to one [gqa x n_kv] score matrix per thread.
void eigen_decode_attention(const eigen_attn_shape & s, const float * q, const float * k, const float * v, float * out,
                            thread_pool & pool, std::vector<std::vector<float>> & scratch);

}  // namespace kvsim
