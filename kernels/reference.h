// Naive references of the attention kernels: straight loops in double (Eigen for the dense Hadamard matrix),
// no tiling, no threads. Tests compare every backend against these.
#pragma once

#include <Eigen/Dense>

#include "attention.h"

namespace kvsim {

// Dense normalised Sylvester-Walsh-Hadamard matrix of order n: H(i,j) = (-1)^popcount(i&j)/sqrt(n).
Eigen::MatrixXd hadamard_matrix(int n);

// KQ mask by the plain rule of semantics doc §6.3 (set_input_kq_mask_impl without the row-reuse shortcut).
void ref_build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst);

// Flash attention by definition in double: dequantize K/V rows with row_to_f32, rotate Q/out with the dense
// Hadamard matrix, scores s = scale*q.k (softcap: softcap*tanh(s/softcap) with scale already divided, as ggml),
// s += slope*mask, two-pass softmax, weighted V sum. Fully masked rows -> zeros. q_dot = q8_0: each rotated Q row
// is first rounded through q8_0 (quantize_row_q8_0 then dequantize), as ggml's CPU kernel does for a q8_0 K
// or q4_0 K (attn_backend::fa_q_dot_type), Q then rotated with the kernels' float fwht_blocks so both round the same floats;
// f32 = Q as given. Throws std::invalid_argument for any other q_dot.
void ref_flash_attn(const fa_desc & d, const fa_args & a, ggml_type q_dot = ggml_type::f32);

// RoPE of one head row in double: theta_i = pos * freq_scale-corrected freq (YaRN ramp and magnitude as
// ggml_rope_ext), rotating the first p.n_rot dims (NORM or NEOX pairs).
void ref_rope(const rope_params & p, int64_t pos, float * x);

// K-shift reference: per cell, row_to_f32, dense H_k un-rotation (quantized + rot), ref_rope, H_k, row_from_f32.
// Does not check the null-rotation hazard (plain path).
void ref_k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift);

}  // namespace kvsim
