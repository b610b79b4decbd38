// Q.K of the grouped CPU flash attention on Intel AMX (TMUL, TDPBSSD) for q8_0 K: the cache's int8 quants are
// loaded into tiles straight from memory (16 cells per tile, the row stride of the cache as tile stride), Q is
// quantized to q8_0 like ggml's CPU flash attention does for a q8_0 K (ggml-cpu/ops.cpp:
// ggml_compute_forward_flash_attn_ext_f16_one_chunk converts Q to the K type's vec_dot_type, q8_0), and each
// block's int32 dot product is scaled by d_q * d_k as ggml_vec_dot_q8_0_q8_0 does.
// Reference: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 1 ch. 20 (AMX), TDPBSSD.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/fa_group.h"
#include "quant.h"

namespace kvsim::cpu {

// True when this build has the AMX code (compiled with AMX-INT8) and the kernel granted this process the tile
// data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asked once per process.
bool amx_int8_available();

// Load (begin) and release (end) this thread's tile configuration; fa_amx_qk_q8_0 runs between them, on the
// same thread. Only when amx_int8_available().
void amx_begin();
void amx_end();

// Largest head size the backend gives fa_amx_qk_q8_0 (the range its tests cover, 64-256, plus the helper-tested
// 512); larger heads take the FMA loops.
constexpr int64_t amx_max_head_dim = 512;

// Bytes amx_pack_q writes for n_rows query rows (a multiple of 64).
size_t amx_packed_q_bytes(int64_t n_rows, int64_t head_dim);

// Packs the q8_0 query rows qq[0..n_rows) (head_dim / 32 blocks each) of one KV head's group into the tile
// layout fa_amx_qk_q8_0 reads, per block of 4 rows (a short last block repeats its last row). Once per call.
void amx_pack_q(const block_q8_0 * const * qq, int64_t n_rows, int64_t head_dim, void * dst);

// scores[r * ld + j] = sum over blocks b of d_q[r][b] * d_k[j][b] * sum_i qs_q[r][b][i] * qs_k[j][b][i] for r <
// n_rows, j < nt (ggml_vec_dot_q8_0_q8_0), where packed_q holds the rows as amx_pack_q packed them and K_j is
// head_dim q8_0 elements at k0 + j*stride (ggml block layout). q[r] is the same row dequantized (f32), used for
// the nt % 16 cells past the last full tile of 16 (the FMA loops, same products). Dead cells are computed too
// (the caller masks them); only memory inside the tile is read. head_dim % 32 == 0, head_dim <=
// amx_max_head_dim; calls pf.step() as fa_group_steps(..., qk_amx = true) counts.
void fa_amx_qk_q8_0(const void * packed_q, const float * const * q, int64_t n_rows, const char * k0, size_t stride,
                    int64_t nt, int64_t head_dim, float * scores, int64_t ld, prefetch_stream & pf);

}  // namespace kvsim::cpu
