// K-shift on the GPU (llama-kv-cache.cpp: build_graph_shift / build_rope_shift, ggml_rope_ext_inplace): one thread
// block per cell. The cell's row is converted to f32 in shared memory, un-rotated by H_k (rotated quantized K),
// RoPE'd per head, rotated back and written in the cache type with ggml's quantizers (bit-exact with
// kernels/quant.cpp: no fused multiply-add where ggml rounds twice). Mirrors kernels/cpu/cpu_k_shift.cpp.
#include "cuda_common.cuh"
#include "cuda_internal.h"
#include "quant.h"

namespace kvsim::cuda {

namespace {

constexpr int ks_threads = 256;

struct ks_params {
    char * k;
    int64_t row_bytes;
    int n;        // elements per row (head_dim * n_head_kv)
    int head_dim, n_head_kv, n_rot, neox, code, rot_n;
    float theta_scale, freq_scale, ext_factor, attn_factor, ext_mscale;  // ext_mscale = 1 + 0.1 ln(1/freq_scale)
    float corr0, corr1;
};

// (cos, sin) * magnitude of pair i0/2 at position pos (rope.cpp rope_cache_init): theta accumulates by repeated
// float multiplication as ggml does, so pair k multiplies k times.
__device__ void rope_pair(const ks_params & p, const float * freq_factors, int64_t pos, int pair, float * cache) {
    float theta = (float) pos;
    for (int k = 0; k < pair; ++k) theta *= p.theta_scale;
    const int i0 = 2 * pair;
    const float ff = freq_factors ? freq_factors[pair] : 1.0f;
    const float theta_extrap = theta / ff;
    const float theta_interp = p.freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float y = (float) (i0 / 2 - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
        const float ramp_mix = (1 - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
        th = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= p.ext_mscale;
    }
    cache[i0 + 0] = cosf(th) * mscale;
    cache[i0 + 1] = sinf(th) * mscale;
}

// Quantize the 32 elements x[0..32) of one block with one warp (lane = element), writing the block at dst.
__device__ void quantize_block_warp(int code, const float * x, char * dst) {
    const int lane = threadIdx.x & 31;
    const float v = x[lane];
    if (code == kv_q8_0) {
        float amax = fabsf(v);
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (lane == 0) *reinterpret_cast<uint16_t *>(dst) = f2h(d);
        dst[2 + lane] = (char) (int8_t) roundf(__fmul_rn(v, id));
        return;
    }
    // q4_0: the element of largest magnitude, first index on ties (quantize_row_q4_0_ref's strict '<')
    float a = fabsf(v);
    int idx = lane;
    for (int o = 16; o > 0; o >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, a, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (a2 > a || (a2 == a && i2 < idx)) {
            a = a2;
            idx = i2;
        }
    }
    const float mx = a == 0.0f ? 0.0f : x[idx];
    const float d = mx / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int t = (int) (__fadd_rn(__fmul_rn(v, id), 8.5f));
    const int q = t < 15 ? t : 15;
    const int q_hi = __shfl_down_sync(0xffffffffu, q, 16);
    if (lane == 0) *reinterpret_cast<uint16_t *>(dst) = f2h(d);
    if (lane < 16) dst[2 + lane] = (char) (uint8_t) (q | (q_hi << 4));
}

__global__ void __launch_bounds__(ks_threads) kshift_kernel(const ks_params p, const int32_t * __restrict__ shift,
                                                             const float * __restrict__ freq_factors) {
    extern __shared__ float sm[];
    float * x = sm;             // [n]
    float * cache = sm + p.n;   // [n_rot]
    const int64_t cell = blockIdx.x;
    char * row = p.k + cell * p.row_bytes;

    for (int pr = threadIdx.x; pr < p.n_rot / 2; pr += blockDim.x) rope_pair(p, freq_factors, shift[cell], pr, cache);
    for (int part = threadIdx.x; part < p.n / kv_part; part += blockDim.x) {
        float v[kv_part];
        load_part(p.code, row, part, v);
        for (int e = 0; e < kv_part; ++e) x[part_elem(p.code, part, e)] = v[e];
    }
    __syncthreads();
    if (p.rot_n) block_fwht(x, p.n, p.rot_n);
    // RoPE pairs of every head (rope.cpp rope_rotate: NORM (2i, 2i+1), NEOX (i, i + n_rot/2))
    const int half = p.n_rot / 2;
    for (int w = threadIdx.x; w < p.n_head_kv * half; w += blockDim.x) {
        const int h = w / half, pr = w % half;
        const int ic = p.neox ? pr : 2 * pr;
        const int off = p.neox ? half : 1;
        float * xh = x + h * p.head_dim;
        const float c = cache[2 * pr], s = cache[2 * pr + 1];
        const float x0 = xh[ic], x1 = xh[ic + off];
        xh[ic] = x0 * c - x1 * s;
        xh[ic + off] = x0 * s + x1 * c;
    }
    __syncthreads();
    if (p.rot_n) block_fwht(x, p.n, p.rot_n);
    switch (p.code) {
        case kv_f32:
            for (int e = threadIdx.x; e < p.n; e += blockDim.x) reinterpret_cast<float *>(row)[e] = x[e];
            break;
        case kv_f16:
            for (int e = threadIdx.x; e < p.n; e += blockDim.x) reinterpret_cast<uint16_t *>(row)[e] = f2h(x[e]);
            break;
        default: {
            const int bytes = p.code == kv_q8_0 ? 34 : 18;
            for (int b = threadIdx.x >> 5; b < p.n / 32; b += blockDim.x >> 5) quantize_block_warp(p.code, x + b * 32, row + b * bytes);
            break;
        }
    }
}

int code_of(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return kv_f32;
        case ggml_type::f16: return kv_f16;
        case ggml_type::q8_0: return kv_q8_0;
        default: return kv_q4_0;  // check_kshift admitted only the four kernel types
    }
}

}  // namespace

void kshift_launch(const kshift_desc & d, const kv_tensor & k, const int32_t * shift, const float * freq_factors, int rot_n,
                   cudaStream_t st) {
    ks_params p{};
    p.k = static_cast<char *>(k.data);
    p.row_bytes = (int64_t) k.row_bytes();
    p.n = (int) (k.head_dim * k.n_head_kv);
    p.head_dim = (int) k.head_dim;
    p.n_head_kv = (int) k.n_head_kv;
    p.n_rot = d.rope.n_rot;
    p.neox = d.rope.mode == rope_mode::neox;
    p.code = code_of(k.type);
    p.rot_n = rot_n;
    // host-side constants computed with the CPU's libm so the per-pair arithmetic starts from the same bits
    p.theta_scale = powf(d.rope.freq_base, -2.0f / d.rope.n_rot);
    p.freq_scale = d.rope.freq_scale;
    p.ext_factor = d.rope.ext_factor;
    p.attn_factor = d.rope.attn_factor;
    p.ext_mscale = 1.0f + 0.1f * logf(1.0f / d.rope.freq_scale);
    float corr[2];
    rope_yarn_corr_dims(d.rope.n_rot, d.rope.n_ctx_orig, d.rope.freq_base, d.rope.beta_fast, d.rope.beta_slow, corr);
    p.corr0 = corr[0];
    p.corr1 = corr[1];
    const size_t smem = (size_t) (p.n + p.n_rot) * sizeof(float);
    if (smem > 48 * 1024) check(cudaFuncSetAttribute(kshift_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem), "K-shift smem");
    const int64_t cells = k.kv_size * k.n_stream;
    kshift_kernel<<<(unsigned) cells, ks_threads, smem, st>>>(p, shift, freq_factors);
    check(cudaGetLastError(), "K-shift launch");
}

}  // namespace kvsim::cuda
