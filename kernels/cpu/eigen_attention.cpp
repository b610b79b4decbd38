#include "cpu/eigen_attention.h"

#include <Eigen/Dense>

namespace kvsim {

void eigen_decode_attention(const eigen_attn_shape & s, const float * q, const float * k, const float * v, float * out,
                            thread_pool & pool, std::vector<std::vector<float>> & scratch) {
    using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using strided = Eigen::Map<const row_major, 0, Eigen::OuterStride<>>;
    const int64_t gqa = s.n_head / s.n_head_kv;
    const int64_t row = s.head_dim * s.n_head_kv;  // floats per cell
    scratch.resize((size_t) pool.size());
    for (auto & b : scratch) b.resize((size_t) (gqa * s.n_kv));
    pool.parallel_for(s.n_stream * s.n_head_kv, [&](int64_t task, int thread) {
        const int64_t st = task / s.n_head_kv, h = task % s.n_head_kv;
        const float * kh = k + st * s.n_kv * row + h * s.head_dim;
        const float * vh = v + st * s.n_kv * row + h * s.head_dim;
        Eigen::Map<const row_major> qg(q + (st * s.n_head + h * gqa) * s.head_dim, gqa, s.head_dim);
        Eigen::Map<row_major> og(out + (st * s.n_head + h * gqa) * s.head_dim, gqa, s.head_dim);
        Eigen::Map<row_major> sc(scratch[(size_t) thread].data(), gqa, s.n_kv);
        sc.noalias() = s.scale * qg * strided(kh, s.n_kv, s.head_dim, Eigen::OuterStride<>(row)).transpose();
        for (int64_t r = 0; r < gqa; ++r) {
            auto sr = sc.row(r);
            sr = (sr.array() - sr.maxCoeff()).exp().matrix();
            sr /= sr.sum();
        }
        og.noalias() = sc * strided(vh, s.n_kv, s.head_dim, Eigen::OuterStride<>(row));
    });
}

}  // namespace kvsim
