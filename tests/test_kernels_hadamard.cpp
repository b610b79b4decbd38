// Fast Walsh-Hadamard transform vs the dense Eigen matrix, rotation sizes and the enabling rule.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hadamard.h"
#include "reference.h"

using namespace kvsim;

TEST_CASE("fwht equals the dense normalised Hadamard product") {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int n : {1, 2, 64, 128, 256, 512}) {
        const Eigen::MatrixXd h = hadamard_matrix(n);
        CHECK((h * h - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() < 1e-12);  // involutive
        std::vector<float> x((size_t) n);
        Eigen::VectorXd xd(n);
        for (int i = 0; i < n; ++i) xd(i) = x[(size_t) i] = (float) u(rng);
        fwht(x.data(), n);
        const Eigen::VectorXd want = h * xd;
        for (int i = 0; i < n; ++i) CHECK(std::fabs(x[(size_t) i] - want(i)) < 1e-5);
    }
    std::vector<float> x(48);
    CHECK_THROWS_AS(fwht(x.data(), 48), std::invalid_argument);
    CHECK_THROWS_AS(fwht_blocks(x.data(), 48, 32), std::invalid_argument);
}

TEST_CASE("rotation sizes and the llama_kv_cache enabling rule") {
    CHECK(hadamard_size_k(128) == 128);
    CHECK(hadamard_size_k(256) == 256);
    CHECK(hadamard_size_k(192) == 64);
    CHECK(hadamard_size_k(576) == 64);
    CHECK(hadamard_size_k(80) == 0);
    CHECK(hadamard_size_v(256) == 64);
    const attn_rot r = attn_rot_config(ggml_type::q8_0, ggml_type::f16, 128, 128, false);
    CHECK(r.n_k == 128);
    CHECK(r.n_v == 0);  // f16 V never rotated
    CHECK(!attn_rot_config(ggml_type::q4_0, ggml_type::q4_0, 128, 128, true).k());
    CHECK(!attn_rot_config(ggml_type::q4_0, ggml_type::q4_0, 96, 96, false).k());
}
