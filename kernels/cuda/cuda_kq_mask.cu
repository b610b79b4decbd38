// KQ mask on the GPU, full and incremental (llama-kv-cache.cpp: set_input_kq_mask_impl), from a device copy of
// the cell metadata. Same rule and same f16 rounding as kernels/cpu/cpu_kq_mask.cpp, so results are bit-equal.
#include <stdexcept>
#include "cuda_common.cuh"
#include "cuda_internal.h"

namespace kvsim::cuda {

namespace {

struct mask_rule {
    int causal, alibi, f16;
    int swa;  // swa_type as int
    int32_t n_swa;
};

// llama_hparams::is_masked_swa (lib/core/types.h).
__device__ __forceinline__ bool masked_swa(const mask_rule & r, int32_t p0, int32_t p1) {
    switch (r.swa) {
        case (int) swa_type::standard: return p1 - p0 >= r.n_swa;
        case (int) swa_type::chunked: return p0 < (p1 / r.n_swa) * r.n_swa;
        case (int) swa_type::symmetric: {
            const int32_t half = r.n_swa / 2;
            const int32_t diff = p1 - p0;
            return diff < -half || diff > half;
        }
        default: return false;
    }
}

__device__ __forceinline__ bool pos_visible(const mask_rule & r, int32_t p0, int32_t p1) {
    if (r.causal && p0 > p1) return false;
    return !masked_swa(r, p0, p1);
}

__device__ __forceinline__ float cell_value(const mask_rule & r, int32_t p0, const uint32_t * seqw, int32_t p1, int32_t seq) {
    if (p0 < 0 || !((seqw[seq >> 5] >> (seq & 31)) & 1u) || !pos_visible(r, p0, p1)) return -INFINITY;
    return r.alibi ? (float) -abs(p0 - p1) : 0.0f;
}

__device__ __forceinline__ void store(const mask_rule & r, void * dst, int64_t idx, float v) {
    if (r.f16) {
        static_cast<uint16_t *>(dst)[idx] = f2h(v);
    } else {
        static_cast<float *>(dst)[idx] = v;
    }
}

// grid (ceil(n_kv/256), n_tps, n_stream): one thread per cell of one row.
__global__ void mask_build_kernel(mask_rule r, mask_meta_dev m, int n_kv, int n_tps, void * dst) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y, s = blockIdx.z;
    if (j >= n_kv) return;
    const int64_t cell = (int64_t) s * n_kv + j, tok = (int64_t) s * n_tps + i;
    store(r, dst, tok * n_kv + j, cell_value(r, m.cell_pos[cell], m.cell_seq + cell * 8, m.tok_pos[tok], m.tok_seq[tok]));
}

// Row-wise part of the update: whole row when the token's seq changed or ALiBi is on, else only cells whose
// causal/SWA decision differs between the old and new token position (reads 4 bytes per cell).
__global__ void mask_update_kernel(mask_rule r, mask_meta_dev m, int n_kv, int n_tps, void * dst) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y, s = blockIdx.z;
    if (j >= n_kv) return;
    const int64_t cell = (int64_t) s * n_kv + j, tok = (int64_t) s * n_tps + i;
    const int32_t p1 = m.tok_pos[tok], p1_old = m.prev_pos[tok], seq = m.tok_seq[tok];
    const int32_t p0 = m.cell_pos[cell];
    const bool whole = r.alibi || seq != m.prev_seq[tok];
    if (whole || (p1 != p1_old && p0 >= 0 && pos_visible(r, p0, p1) != pos_visible(r, p0, p1_old))) {
        store(r, dst, tok * n_kv + j, cell_value(r, p0, m.cell_seq + cell * 8, p1, seq));
    }
}

// Changed cells, every row: grid (ceil(max_changed/256), n_tps, n_stream).
__global__ void mask_changed_kernel(mask_rule r, mask_meta_dev m, const uint32_t * changed, const int32_t * n_changed,
                                    int max_changed, int n_kv, int n_tps, void * dst) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y, s = blockIdx.z;
    if (k >= n_changed[s]) return;
    const int j = (int) changed[(int64_t) s * max_changed + k];
    const int64_t cell = (int64_t) s * n_kv + j, tok = (int64_t) s * n_tps + i;
    store(r, dst, tok * n_kv + j, cell_value(r, m.cell_pos[cell], m.cell_seq + cell * 8, m.tok_pos[tok], m.tok_seq[tok]));
}

__global__ void mask_scatter_kernel(int n_kv, const uint32_t * changed, const int32_t * n_changed, int max_changed,
                                    const int32_t * pos, const uint32_t * seqw, int32_t * cell_pos, uint32_t * cell_seq) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int s = blockIdx.y;
    if (k >= n_changed[s]) return;
    const int64_t src = (int64_t) s * max_changed + k;
    const int64_t cell = (int64_t) s * n_kv + changed[src];
    cell_pos[cell] = pos[src];
    for (int w = 0; w < 8; ++w) cell_seq[cell * 8 + w] = seqw[src * 8 + w];
}

mask_rule rule_of(const kq_mask_desc & d) {
    return {d.causal ? 1 : 0, d.alibi ? 1 : 0, d.type == ggml_type::f16 ? 1 : 0, (int) d.swa, (int32_t) d.n_swa};
}

constexpr int mask_threads = 256;

// grid.y = n_tps and grid.z = n_stream: the launch would fail beyond 65535, so refuse with the reason
void check_mask_grid(const kq_mask_desc & d) {
    if (d.n_tps > 65535 || d.n_stream > 65535) {
        throw std::invalid_argument("CUDA KQ mask: n_tps and n_stream must be <= 65535 (grid limit)");
    }
}

}  // namespace

void mask_build_launch(const kq_mask_desc & d, const mask_meta_dev & m, void * dst, cudaStream_t st) {
    check_mask_grid(d);
    const dim3 grid((unsigned) ((d.n_kv + mask_threads - 1) / mask_threads), (unsigned) d.n_tps, (unsigned) d.n_stream);
    mask_build_kernel<<<grid, mask_threads, 0, st>>>(rule_of(d), m, (int) d.n_kv, (int) d.n_tps, dst);
    check(cudaGetLastError(), "KQ mask build launch");
}

void mask_update_launch(const kq_mask_desc & d, const mask_meta_dev & m, const uint32_t * changed, const int32_t * n_changed,
                        int max_changed, void * dst, cudaStream_t st) {
    check_mask_grid(d);
    const dim3 grid((unsigned) ((d.n_kv + mask_threads - 1) / mask_threads), (unsigned) d.n_tps, (unsigned) d.n_stream);
    mask_update_kernel<<<grid, mask_threads, 0, st>>>(rule_of(d), m, (int) d.n_kv, (int) d.n_tps, dst);
    if (max_changed > 0) {
        const dim3 g2((unsigned) ((max_changed + mask_threads - 1) / mask_threads), (unsigned) d.n_tps, (unsigned) d.n_stream);
        mask_changed_kernel<<<g2, mask_threads, 0, st>>>(rule_of(d), m, changed, n_changed, max_changed, (int) d.n_kv,
                                                         (int) d.n_tps, dst);
    }
    check(cudaGetLastError(), "KQ mask update launch");
}

void mask_scatter_launch(int64_t n_stream, int64_t n_kv, const uint32_t * changed, const int32_t * n_changed, int max_changed,
                         const int32_t * pos, const uint32_t * seqw, int32_t * cell_pos, uint32_t * cell_seq, cudaStream_t st) {
    if (max_changed <= 0) return;
    const dim3 grid((unsigned) ((max_changed + mask_threads - 1) / mask_threads), (unsigned) n_stream);
    mask_scatter_kernel<<<grid, mask_threads, 0, st>>>((int) n_kv, changed, n_changed, max_changed, pos, seqw, cell_pos, cell_seq);
    check(cudaGetLastError(), "KQ mask scatter launch");
}

}  // namespace kvsim::cuda
