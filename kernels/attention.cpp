#include "attention.h"
#include "core/errors.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <cmath>
#include <stdexcept>
#include <string>

namespace kvsim {

float alibi_slope(int64_t h, int64_t n_head, float max_bias) {
    if (max_bias <= 0.0f) return 1.0f;
    const uint32_t n_head_log2 = 1u << (uint32_t) std::floor(std::log2((double) n_head));
    const float m0 = powf(2.0f, -(max_bias) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);
    return (uint32_t) h < n_head_log2 ? powf(m0, (float) (h + 1)) : powf(m1, (float) (2 * (h - n_head_log2) + 1));
}

void check_kq_mask_desc(const kq_mask_desc & d, const kq_mask_stream * streams) {
    if (d.type != ggml_type::f16 && d.type != ggml_type::f32) throw std::invalid_argument("KQ mask type must be f16 or f32");
    if (d.n_kv <= 0 || d.n_tps <= 0 || d.n_stream <= 0) throw std::invalid_argument("KQ mask with an empty dimension");
    if (d.swa != swa_type::none && d.n_swa == 0) throw std::invalid_argument("KQ mask: SWA with n_swa = 0");
    for (int64_t s = 0; s < d.n_stream; ++s) {
        const auto & st = streams[s];
        if (!st.cell_pos || !st.cell_seq || !st.tok_pos || !st.tok_seq) {
            throw std::invalid_argument("KQ mask: null input for stream " + std::to_string(s));
        }
        for (int64_t i = 0; i < d.n_tps; ++i) {
            if (st.tok_seq[i] < 0 || st.tok_seq[i] >= LLAMA_MAX_SEQ) {
                throw std::invalid_argument("KQ mask: token seq id " + std::to_string(st.tok_seq[i]) + " out of range");
            }
        }
    }
}

namespace {
bool rot_size_ok(int n) { return n == 0 || (n > 0 && (n & (n - 1)) == 0); }
}  // namespace

void check_fa(const fa_desc & d, const fa_args & a) {
    auto fail = [](const std::string & why) { throw std::invalid_argument("flash_attn: " + why); };
    check_kv_tensor(a.k, "flash_attn K");
    check_kv_tensor(a.v, "flash_attn V");
    if (d.n_head <= 0 || d.n_head_kv <= 0 || d.n_head % d.n_head_kv != 0) fail("n_head must be a multiple of n_head_kv");
    if (a.k.head_dim != d.head_dim_k || a.v.head_dim != d.head_dim_v) fail("head dims differ from the K/V tensors");
    if (a.k.n_head_kv != d.n_head_kv || a.v.n_head_kv != d.n_head_kv) fail("n_head_kv differs from the K/V tensors");
    if (d.head_dim_k % 32 != 0 || d.head_dim_v % 32 != 0) fail("head dims must be multiples of 32");
    if (d.n_kv <= 0 || d.n_kv > a.k.kv_size || a.k.kv_size != a.v.kv_size) fail("n_kv outside the cache");
    if (d.n_tps <= 0 || d.n_stream <= 0 || a.stream0 < 0 || a.stream0 + d.n_stream > a.k.n_stream) fail("bad streams");
    if (a.v.n_stream != a.k.n_stream) fail("K and V stream counts differ");
    if (!a.q || !a.out) fail("null q or out");
    if (a.mask && a.mask_type != ggml_type::f16 && a.mask_type != ggml_type::f32) fail("mask type must be f16 or f32");
    if (d.max_bias > 0.0f && !a.mask) fail("max_bias > 0 requires a mask");
    if (d.rot.n_k && d.head_dim_k % d.rot.n_k != 0) fail("K rotation size does not divide head_dim_k");
    // the Walsh-Hadamard transforms (CPU fwht, CUDA block_fwht) are defined for powers of two only
    if (!rot_size_ok(d.rot.n_k) || !rot_size_ok(d.rot.n_v)) fail("rotation sizes must be 0 or a power of two");
    if (d.rot.n_v && d.head_dim_v % d.rot.n_v != 0) fail("V rotation size does not divide head_dim_v");
}

void check_kshift(const kshift_desc & d, const kv_tensor & k) {
    check_kv_tensor(k, "k_shift");
    if (d.rope.n_rot <= 0 || d.rope.n_rot % 2 != 0 || d.rope.n_rot > k.head_dim) {
        throw std::invalid_argument("k_shift: n_rot " + std::to_string(d.rope.n_rot) + " must be even and <= head_dim");
    }
    if (d.rot.n_k && k.head_dim % d.rot.n_k != 0) throw std::invalid_argument("k_shift: rotation size does not divide head_dim");
    if (!rot_size_ok(d.rot.n_k)) throw std::invalid_argument("k_shift: rotation size must be 0 or a power of two");
}

kshift_report begin_kshift(const kshift_desc & d, const kv_tensor & k) {
    check_kshift(d, k);
    kshift_report rep;
    rep.cells = k.kv_size * k.n_stream;
    rep.null_rotation_hazard = ggml_is_quantized(k.type) && !d.rot.k();
    if (rep.null_rotation_hazard && d.on_null_rot == null_rot_policy::refuse) {
        throw usage_error(
            "K-shift of a quantized K cache without Hadamard rotation: llama.cpp dereferences a null rotation tensor "
            "here and crashes (PR #25636); pass null_rot_policy::plain to shift without rotation");
    }
    return rep;
}

std::shared_ptr<void> attn_backend::alloc(size_t bytes) {
    void * p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, std::free);
}

void attn_backend::upload(void * dst, const void * host_src, size_t bytes) { std::memcpy(dst, host_src, bytes); }

void attn_backend::download(void * host_dst, const void * src, size_t bytes) { std::memcpy(host_dst, src, bytes); }

void attn_backend::copy(void * dst, const void * src, size_t bytes) { std::memcpy(dst, src, bytes); }

}  // namespace kvsim
