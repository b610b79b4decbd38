// Decode flash attention: implementation choice (KVSIM_CUDA_FA), occupancy-aware split-KV plan, launch of the
// typed chunk kernel (cuda_fa_decode.cuh, instantiated per type in cuda_fa_decode_<type>.cu) and of the
// log-sum-exp merge of its chunks in log2 units. Contract: cuda_fa_decode.h.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_fa_decode.h"
#include "cuda_internal.h"
#include "fa_merge.cuh"
#include "fa_split.h"

namespace kvsim::cuda {

namespace {

template <int D>
void launch_merge(const float * part, float * out, int n_chunks, int n_q, int n_stream, int rot_v, cudaStream_t st) {
    fa_merge_kernel<D, true><<<dim3((unsigned) n_q, (unsigned) n_stream), D, 0, st>>>(part, out, n_chunks, n_q, rot_v);
}

fa_decode_kernel_info info_of(ggml_type t, int d, int r) {
    switch (t) {
        case ggml_type::f32: return fa_decode_info_f32(d, r);
        case ggml_type::f16: return fa_decode_info_f16(d, r);
        case ggml_type::q8_0: return fa_decode_info_q8_0(d, r);
        case ggml_type::q4_0: return fa_decode_info_q4_0(d, r);
        default: throw std::invalid_argument("CUDA flash_attn: no decode kernel for this KV type");
    }
}

int64_t row_groups(const fa_desc & d) {
    const int64_t rows = d.n_tps * (d.n_head / d.n_head_kv);
    const int64_t r = fa_rows_per_block(d);
    return (rows + r - 1) / r;
}

}  // namespace

bool fa_decode_supports(const fa_args & a) {
    if (a.k.type != a.v.type) return false;
    switch (a.k.type) {
        case ggml_type::f32:
        case ggml_type::f16:
        case ggml_type::q8_0:
        case ggml_type::q4_0: break;
        default: return false;
    }
    return reinterpret_cast<uintptr_t>(a.k.data) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v.data) % 16 == 0;
}

fa_plan fa_plan_legacy(const fa_desc & d, int sm_count) {
    const int64_t base = d.n_stream * d.n_head_kv * row_groups(d);
    const int64_t target = 4 * (int64_t) sm_count;
    const int64_t max_chunks = std::max<int64_t>(1, (d.n_kv + 255) / 256);
    const int64_t n_chunks = std::clamp<int64_t>((target + base - 1) / base, 1, max_chunks);
    fa_plan p;
    p.chunk = ((d.n_kv + n_chunks - 1) / n_chunks + 63) / 64 * 64;
    p.n_chunks = (d.n_kv + p.chunk - 1) / p.chunk;
    p.n_threads = 128;
    return p;
}

fa_plan fa_plan_select(const fa_desc & d, int sm_count) {
    if (fa_impl_requested() == fa_impl::legacy) return fa_plan_legacy(d, sm_count);
    // head dims the kernels do not instantiate are refused at launch (fa_check_cuda_shape); plan them as 128
    const int hd = d.head_dim_k == 64 || d.head_dim_k == 256 ? (int) d.head_dim_k : 128;
    const fa_decode_kernel_info k = fa_decode_info_f16(hd, fa_rows_per_block(d));
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, 0), "flash_attn occupancy query");
    fa_split_input in;
    in.base_blocks = d.n_stream * d.n_head_kv * row_groups(d);
    in.n_kv = d.n_kv;
    in.blocks_per_sm = std::max(per_sm, 1);
    in.sm_count = std::max(sm_count, 1);
    in.tile = 64;  // a multiple of every instantiation's tile (powers of two <= 64)
    in.min_chunk = 256;
    const fa_split s = plan_fa_split(in);
    fa_plan p;
    p.chunk = s.chunk;
    p.n_chunks = s.n_chunks;
    p.n_threads = k.threads;
    return p;
}

void fa_decode_launch(const fa_desc & d, const fa_plan & plan, const fa_args & a, const float * q, float * part, cudaStream_t st) {
    fa_decode_params p{};
    p.q = q;
    p.k = static_cast<const char *>(a.k.data);
    p.v = static_cast<const char *>(a.v.data);
    p.mask = a.mask;
    p.part = part;
    p.k_row = (int64_t) a.k.row_bytes();
    p.v_row = (int64_t) a.v.row_bytes();
    p.k_head = (int64_t) a.k.head_bytes();
    p.v_head = (int64_t) a.v.head_bytes();
    p.kv_size = a.k.kv_size;
    p.stream0 = a.stream0;
    p.mask_f16 = a.mask_type == ggml_type::f16;
    p.n_kv = (int) d.n_kv;
    p.n_tps = (int) d.n_tps;
    p.n_head = (int) d.n_head;
    p.n_head_kv = (int) d.n_head_kv;
    p.gqa = (int) (d.n_head / d.n_head_kv);
    p.n_rows = (int) (d.n_tps * p.gqa);
    const int R = fa_rows_per_block(d);
    p.n_rgroups = (p.n_rows + R - 1) / R;
    p.chunk = (int) plan.chunk;
    p.n_chunks = (int) plan.n_chunks;
    p.scale = d.softcap != 0.0f ? d.scale / d.softcap : d.scale;
    p.softcap = d.softcap;
    p.max_bias = d.max_bias;

    const fa_decode_kernel_info k = info_of(a.k.type, (int) d.head_dim_k, R);
    const dim3 grid((unsigned) p.n_chunks, (unsigned) (p.n_head_kv * p.n_rgroups), (unsigned) d.n_stream);
    void * args[] = {&p};
    check(cudaLaunchKernel(k.fn, grid, dim3((unsigned) k.threads), args, 0, st), "flash_attn decode launch");
    const int n_q = p.n_head * p.n_tps;
    switch (d.head_dim_v) {
        case 64: launch_merge<64>(part, a.out, p.n_chunks, n_q, (int) d.n_stream, d.rot.n_v, st); break;
        case 128: launch_merge<128>(part, a.out, p.n_chunks, n_q, (int) d.n_stream, d.rot.n_v, st); break;
        default: launch_merge<256>(part, a.out, p.n_chunks, n_q, (int) d.n_stream, d.rot.n_v, st); break;
    }
    check(cudaGetLastError(), "flash_attn decode merge launch");
}

}  // namespace kvsim::cuda
