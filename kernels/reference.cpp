#include "reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "hadamard.h"
#include "quant.h"

namespace kvsim {

Eigen::MatrixXd hadamard_matrix(int n) {
    Eigen::MatrixXd h(n, n);
    const double s = 1.0 / std::sqrt((double) n);
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) h(i, j) = (std::popcount((unsigned) (i & j)) & 1) ? -s : s;
    }
    return h;
}

namespace {
// Apply the dense H_n block-diagonally to x[0..len).
void dense_rotate(float * x, int64_t len, int n) {
    const Eigen::MatrixXd h = hadamard_matrix(n);
    for (int64_t b = 0; b < len; b += n) {
        Eigen::VectorXd v(n);
        for (int i = 0; i < n; ++i) v(i) = x[b + i];
        const Eigen::VectorXd r = h * v;
        for (int i = 0; i < n; ++i) x[b + i] = (float) r(i);
    }
}

float mask_value(ggml_type t, const void * mask, size_t idx) {
    return t == ggml_type::f16 ? fp16_to_fp32(static_cast<const fp16_t *>(mask)[idx]) : static_cast<const float *>(mask)[idx];
}
}  // namespace

void ref_build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) {
    check_kq_mask_desc(d, streams);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        const auto & st = streams[s];
        for (int64_t i = 0; i < d.n_tps; ++i) {
            const llama_pos p1 = st.tok_pos[i];
            const llama_seq_id seq = st.tok_seq[i];
            for (int64_t j = 0; j < d.n_kv; ++j) {
                const llama_pos p0 = st.cell_pos[j];
                bool masked = p0 < 0 || !st.cell_seq[j].test((size_t) seq);
                if (!masked && d.causal && p0 > p1) masked = true;
                if (!masked && is_masked_swa(d.n_swa, d.swa, p0, p1)) masked = true;
                const float v = masked ? -INFINITY : d.alibi ? (float) -std::abs(p0 - p1) : 0.0f;
                const size_t idx = (size_t) ((s * d.n_tps + i) * d.n_kv + j);
                if (d.type == ggml_type::f16) {
                    static_cast<fp16_t *>(dst)[idx] = fp32_to_fp16(v);
                } else {
                    static_cast<float *>(dst)[idx] = v;
                }
            }
        }
    }
}

void ref_flash_attn(const fa_desc & d, const fa_args & a, ggml_type q_dot) {
    check_fa(d, a);
    if (q_dot != ggml_type::f32 && q_dot != ggml_type::q8_0) throw std::invalid_argument("ref_flash_attn: q_dot must be f32 or q8_0");
    std::vector<block_q8_0> qq((size_t) (d.head_dim_k / QK8_0));
    const int64_t gqa = d.n_head / d.n_head_kv;
    std::vector<float> q((size_t) d.head_dim_k), kr((size_t) d.head_dim_k), vr((size_t) d.head_dim_v), o((size_t) d.head_dim_v);
    std::vector<double> sc((size_t) d.n_kv), acc((size_t) d.head_dim_v);
    const double softcap = d.softcap;
    const double scale = softcap != 0.0 ? (double) d.scale / softcap : (double) d.scale;
    for (int64_t s = 0; s < d.n_stream; ++s) {
        for (int64_t t = 0; t < d.n_tps; ++t) {
            for (int64_t h = 0; h < d.n_head; ++h) {
                const int64_t hk = h / gqa;
                const float * qs = a.q + ((s * d.n_tps + t) * d.n_head + h) * d.head_dim_k;
                std::copy(qs, qs + d.head_dim_k, q.begin());
                if (d.rot.k() && q_dot == ggml_type::q8_0) {
                    // rounding to q8_0 is discontinuous: round the very floats the kernels round (their float
                    // FWHT, itself tested against the dense matrix), not the dense product's, or a Q element on a
                    // rounding boundary flips a quant and moves the outputs by ~3e-4
                    fwht_blocks(q.data(), d.head_dim_k, d.rot.n_k);
                } else if (d.rot.k()) {
                    dense_rotate(q.data(), d.head_dim_k, d.rot.n_k);
                }
                if (q_dot == ggml_type::q8_0) {
                    round_row_q8_0(q.data(), qq.data(), d.head_dim_k);
                }
                const double slope = alibi_slope(h, d.n_head, d.max_bias);
                double mx = -INFINITY;
                for (int64_t j = 0; j < d.n_kv; ++j) {
                    const double mv = a.mask ? slope * mask_value(a.mask_type, a.mask, (size_t) ((s * d.n_tps + t) * d.n_kv + j)) : 0.0;
                    if (mv == -INFINITY) {
                        sc[(size_t) j] = -INFINITY;
                        continue;
                    }
                    row_to_f32(a.k.type, static_cast<const char *>(a.k.row(a.stream0 + s, j)) + hk * a.k.head_bytes(), kr.data(),
                               d.head_dim_k);
                    double dot = 0.0;
                    for (int64_t e = 0; e < d.head_dim_k; ++e) dot += (double) q[(size_t) e] * kr[(size_t) e];
                    double x = dot * scale;
                    if (softcap != 0.0) x = softcap * std::tanh(x);
                    sc[(size_t) j] = x + mv;
                    mx = std::max(mx, sc[(size_t) j]);
                }
                std::fill(acc.begin(), acc.end(), 0.0);
                double sum = 0.0;
                if (mx != -INFINITY) {
                    for (int64_t j = 0; j < d.n_kv; ++j) {
                        if (sc[(size_t) j] == -INFINITY) continue;
                        const double p = std::exp(sc[(size_t) j] - mx);
                        sum += p;
                        row_to_f32(a.v.type, static_cast<const char *>(a.v.row(a.stream0 + s, j)) + hk * a.v.head_bytes(), vr.data(),
                                   d.head_dim_v);
                        for (int64_t e = 0; e < d.head_dim_v; ++e) acc[(size_t) e] += p * vr[(size_t) e];
                    }
                }
                for (int64_t e = 0; e < d.head_dim_v; ++e) o[(size_t) e] = sum > 0.0 ? (float) (acc[(size_t) e] / sum) : 0.0f;
                if (d.rot.v()) dense_rotate(o.data(), d.head_dim_v, d.rot.n_v);
                std::copy(o.begin(), o.end(), a.out + ((s * d.n_tps + t) * d.n_head + h) * d.head_dim_v);
            }
        }
    }
}

void ref_rope(const rope_params & p, int64_t pos, float * x) {
    float corr[2];
    rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
    const bool neox = p.mode == rope_mode::neox;
    for (int64_t i = 0; i < p.n_rot / 2; ++i) {
        const double ff = p.freq_factors ? p.freq_factors[i] : 1.0;
        const double extrap = (double) pos * std::pow((double) p.freq_base, -2.0 * (double) i / p.n_rot) / ff;
        const double interp = p.freq_scale * extrap;
        double theta = interp;
        double mscale = p.attn_factor;
        if (p.ext_factor != 0.0f) {
            const double y = ((double) i - corr[0]) / std::max(0.001, (double) corr[1] - corr[0]);
            const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
            theta = interp * (1.0 - ramp) + extrap * ramp;
            mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
        }
        const int64_t i0 = neox ? i : 2 * i;
        const int64_t i1 = neox ? i + p.n_rot / 2 : 2 * i + 1;
        const double x0 = x[i0];
        const double x1 = x[i1];
        x[i0] = (float) ((x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale);
        x[i1] = (float) ((x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale);
    }
}

void ref_k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) {
    check_kshift(d, k);
    const bool rot = ggml_is_quantized(k.type) && d.rot.k();
    const int64_t n = k.head_dim * k.n_head_kv;
    std::vector<float> row((size_t) n);
    for (int64_t c = 0; c < k.kv_size * k.n_stream; ++c) {
        void * r = k.row(0, c);
        row_to_f32(k.type, r, row.data(), n);
        if (rot) dense_rotate(row.data(), n, d.rot.n_k);
        for (int64_t h = 0; h < k.n_head_kv; ++h) ref_rope(d.rope, shift[c], row.data() + h * k.head_dim);
        if (rot) dense_rotate(row.data(), n, d.rot.n_k);
        row_from_f32(k.type, row.data(), r, n);
    }
}

}  // namespace kvsim
