// CUDA backend vs the CPU backend and the double-precision references: flash attention over head dims, GQA
// ratios, n_kv (odd sizes, 65536), every KV type, holes, SWA borders, fully masked rows, softcap, ALiBi, Hadamard
// rotation; KQ mask build and incremental update bit-exact; K-shift plain and quantized. Without a CUDA device (or
// without the CUDA build) every case is skipped with the reason (tests/test_skip.h): ctest reports test_cuda as
// skipped, never as passed.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "kv_content.h"
#include "quant.h"
#include "kernel_test_util.h"
#include "reference.h"
#include "test_skip.h"
#include "core/errors.h"

#if defined(KVSIM_HAVE_CUDA)
#include "cuda_backend.h"
#endif

using namespace kvsim;

#if !defined(KVSIM_HAVE_CUDA)

TEST_CASE("CUDA backend") { KVSIM_SKIP_CASE("no CUDA device: kvsim was built without the CUDA backend (nvcc not found)"); }

#else

namespace {

// Skips the running test case, with the CUDA runtime's reason, when no CUDA device can be used.
#define REQUIRE_CUDA_DEVICE()                                                             \
    do {                                                                                  \
        std::string why_;                                                                 \
        if (!cuda_device_available(&why_)) KVSIM_SKIP_CASE(why_);                         \
    } while (0)

// A host K or V cache and its device copy.
struct dev_tensor {
    kv_tensor host, dev;
    std::vector<char> hbuf;
    cuda_buffer dbuf;
    dev_tensor(ggml_type t, int64_t head_dim, int64_t n_head_kv, int64_t kv_size, int64_t n_stream)
        : host{nullptr, t, head_dim, n_head_kv, kv_size, n_stream} {
        hbuf.resize(host.total_bytes());
        host.data = hbuf.data();
        dbuf = cuda_buffer(host.total_bytes());
        dev = host;
        dev.data = dbuf.data();
    }
    void upload() { dbuf.upload(hbuf.data(), hbuf.size()); }
    void download() { dbuf.download(hbuf.data(), hbuf.size()); }
};

template <typename T>
cuda_buffer to_device(const std::vector<T> & v) {
    cuda_buffer b(v.size() * sizeof(T));
    b.upload(v.data(), b.size());
    return b;
}

struct fa_case {
    int64_t head_dim = 128, gqa = 4, n_head_kv = 2, n_kv = 300, n_tps = 1, n_stream = 1;
    ggml_type tk = ggml_type::f16, tv = ggml_type::f16;
    float softcap = 0.0f, max_bias = 0.0f, scale = 0.0f;
    bool rot = false;
    int hole_every = 7;
    uint32_t n_swa = 0;
    bool mask_all = false;  // token 0 of every stream belongs to a sequence that owns no cell
    bool mask_f32 = false;
    int64_t stream0 = 0;
    bool no_mask = false;  // mask == nullptr: every cell < n_kv visible (the mask is still built, not passed)
};

// CUDA output vs ref_flash_attn with the CPU backend's tolerances (kernels/cpu/cpu_backend.h), and vs the CPU
// backend itself.
void run_fa(const fa_case & c, attn_backend & gpu, cpu_backend & cpu, uint32_t seed) {
    std::mt19937 rng(seed);
    const attn_rot rot = attn_rot_config(c.tk, c.tv, c.head_dim, c.head_dim, !c.rot);
    const int64_t kv_size = c.n_kv + 5, n_streams = c.stream0 + c.n_stream;
    dev_tensor k(c.tk, c.head_dim, c.n_head_kv, kv_size, n_streams), v(c.tv, c.head_dim, c.n_head_kv, kv_size, n_streams);
    test::write_kv_cells(k.host, v.host, rot);
    k.upload();
    v.upload();
    const fa_desc d = test::fa_desc_of(c, rot);

    const test::case_mask cm = test::build_case_mask(c, kv_size, cpu);
    const std::vector<float> & mask = cm.data;
    const kq_mask_desc & md = cm.desc;
    cuda_buffer dmask = to_device(mask);

    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> q((size_t) (c.head_dim * d.n_head * c.n_tps * c.n_stream));
    for (auto & x : q) x = u(rng);
    cuda_buffer dq = to_device(q);
    const size_t n_out = q.size();
    std::vector<float> out_ref(n_out), out_cpu(n_out), out(n_out, NAN);
    cuda_buffer dout(n_out * sizeof(float));

    fa_args a{q.data(), k.host, v.host, c.stream0, c.no_mask ? nullptr : mask.data(), md.type, out_ref.data()};
    ref_flash_attn(d, a);
    a.out = out_cpu.data();
    cpu.set_fa_quantize_q(false);  // like the CUDA kernel: Q stays f32 for every K type
    cpu.flash_attn(d, cpu.plan_flash_attn(d), a);
    fa_args ga{static_cast<const float *>(dq.data()), k.dev, v.dev, c.stream0, c.no_mask ? nullptr : dmask.data(), md.type,
               static_cast<float *>(dout.data())};
    gpu.flash_attn(d, gpu.plan_flash_attn(d), ga);
    dout.download(out.data(), n_out * sizeof(float));

    double err_ref = 0.0, err_cpu = 0.0;
    bool finite = true;
    for (size_t i = 0; i < n_out; ++i) {
        finite &= std::isfinite(out[i]);
        err_ref = std::max(err_ref, (double) std::fabs(out[i] - out_ref[i]));
        err_cpu = std::max(err_cpu, (double) std::fabs(out[i] - out_cpu[i]));
    }
    const double tol = c.tk == ggml_type::f32 && c.tv == ggml_type::f32 ? 2e-5 : 1e-4;
    INFO("hd " << c.head_dim << " gqa " << c.gqa << " n_kv " << c.n_kv << " n_tps " << c.n_tps << " n_stream " << c.n_stream
               << " tk " << ggml_type_name(c.tk) << " tv " << ggml_type_name(c.tv) << " rot " << c.rot << " err_ref "
               << err_ref << " err_cpu " << err_cpu);
    CHECK(finite);
    CHECK(err_ref <= tol);
    CHECK(err_cpu <= 2 * tol);
    if (c.mask_all) {
        for (int64_t s = 0; s < c.n_stream; ++s) {
            const size_t o = (size_t) (s * c.n_tps * d.n_head * c.head_dim);
            for (int64_t e = 0; e < c.head_dim * d.n_head; ++e) CHECK(out[o + (size_t) e] == 0.0f);
        }
    }
}

}  // namespace

TEST_CASE("CUDA flash attention matches the reference: head dims, GQA, every KV type") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    uint32_t seed = 1;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int64_t hd : {64, 128, 256}) {
            for (int64_t gqa : {1, 4, 8}) {
                fa_case c;
                c.tk = c.tv = t;
                c.head_dim = hd;
                c.gqa = gqa;
                c.n_kv = 1 + (int64_t) (seed * 97 % 700);
                c.rot = ggml_is_quantized(t) && seed % 2 == 0;
                run_fa(c, *gpu, cpu, seed++);
            }
        }
    }
}

TEST_CASE("CUDA flash attention: mixed types, prefill chunks, streams, f32 mask, odd and large n_kv") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    fa_case c;
    c.tk = ggml_type::q8_0;
    c.tv = ggml_type::f16;
    c.n_tps = 3;
    c.n_stream = 2;
    c.n_kv = 1000;
    run_fa(c, *gpu, cpu, 11);
    c.tk = ggml_type::f16;
    c.tv = ggml_type::q4_0;
    c.rot = true;
    run_fa(c, *gpu, cpu, 12);
    c.mask_f32 = true;
    c.stream0 = 1;
    c.n_stream = 1;
    run_fa(c, *gpu, cpu, 13);
    c = fa_case{};
    c.n_tps = 7;  // 28 query rows per kv head: several row groups of 8
    c.gqa = 4;
    c.n_kv = 2049;
    run_fa(c, *gpu, cpu, 14);
    for (int64_t n : {1, 31, 32, 33, 63, 65, 257, 4097, 8191}) {
        fa_case e;
        e.n_kv = n;
        e.hole_every = n > 3 ? 5 : 0;
        run_fa(e, *gpu, cpu, (uint32_t) n);
    }
    for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        fa_case big;
        big.n_kv = 65536;
        big.n_head_kv = 1;
        big.gqa = 8;
        big.head_dim = 128;
        big.tk = big.tv = t;
        big.n_swa = 40000;  // SWA border far inside the cache: most early tiles skipped
        run_fa(big, *gpu, cpu, 99);
    }
    fa_case batch;  // decode batch of 8 sequences in 8 streams
    batch.n_stream = 8;
    batch.n_kv = 5000;
    batch.gqa = 8;
    run_fa(batch, *gpu, cpu, 21);
}

TEST_CASE("CUDA flash attention: SWA borders, fully masked rows, softcap, ALiBi") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    fa_case c;
    c.n_kv = 500;
    c.n_tps = 2;
    c.n_swa = 33;
    run_fa(c, *gpu, cpu, 5);
    c.mask_all = true;
    c.n_stream = 2;
    run_fa(c, *gpu, cpu, 6);
    c.mask_all = false;
    c.n_stream = 1;
    c.n_swa = 0;
    c.softcap = 5.0f;
    c.scale = 1.0f;
    run_fa(c, *gpu, cpu, 7);
    c.scale = 0.0f;
    c.softcap = 0.0f;
    c.max_bias = 8.0f;
    c.gqa = 3;  // n_head 6: ALiBi m1 branch, 3 rows per kv head (partial row group)
    run_fa(c, *gpu, cpu, 8);
}

TEST_CASE("CUDA flash attention rejects shapes it does not instantiate") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    dev_tensor k(ggml_type::f16, 96, 2, 16, 1), v(ggml_type::f16, 96, 2, 16, 1);
    cuda_buffer q(96 * 8 * 4), out(96 * 8 * 4);
    fa_desc d;
    d.head_dim_k = d.head_dim_v = 96;
    d.n_head = 8;
    d.n_head_kv = 2;
    d.n_kv = 16;
    fa_args a{static_cast<const float *>(q.data()), k.dev, v.dev, 0, nullptr, ggml_type::f16, static_cast<float *>(out.data())};
    CHECK_THROWS_AS(gpu->flash_attn(d, gpu->plan_flash_attn(d), a), std::invalid_argument);
}

namespace {

// KVSIM_CUDA_FA = value for the scope (cuda_fa_decode.h: "decode" or "legacy"), the previous value restored.
struct fa_impl_scope {
    std::string old;
    bool had = false;
    explicit fa_impl_scope(const char * value) {
        if (const char * e = std::getenv("KVSIM_CUDA_FA")) {
            had = true;
            old = e;
        }
        setenv("KVSIM_CUDA_FA", value, 1);
    }
    ~fa_impl_scope() {
        if (had) setenv("KVSIM_CUDA_FA", old.c_str(), 1);
        else unsetenv("KVSIM_CUDA_FA");
    }
};

}  // namespace

// Both kernels (the typed pipelined decode kernel and KVSIM_CUDA_FA=legacy) on n_head_kv 8, every same-type
// pair, GQA 1/4/8, with and without a mask (mask == nullptr: every cell visible), a Llama-3-8B-like decode batch
// and multi-tile chunks with softcap.
TEST_CASE("CUDA flash attention: n_head_kv 8, mask == nullptr, decode and legacy kernels") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    for (const char * impl : {"decode", "legacy"}) {
        fa_impl_scope scope(impl);
        INFO("KVSIM_CUDA_FA=" << impl);
        uint32_t seed = 1800;
        for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0, ggml_type::f32}) {
            for (int64_t gqa : {1, 4, 8}) {
                for (bool no_mask : {false, true}) {
                    fa_case c;
                    c.tk = c.tv = t;
                    c.n_head_kv = 8;
                    c.gqa = gqa;
                    c.n_kv = 777;
                    c.n_stream = 2;
                    c.no_mask = no_mask;
                    run_fa(c, *gpu, cpu, seed++);
                }
            }
        }
        fa_case b;  // decode batch: 8 streams x 8 kv heads x GQA 4, no mask, several chunks of several tiles
        b.n_stream = 8;
        b.n_head_kv = 8;
        b.gqa = 4;
        b.n_kv = 4097;
        b.no_mask = true;
        run_fa(b, *gpu, cpu, seed++);
        b.tk = b.tv = ggml_type::q4_0;
        run_fa(b, *gpu, cpu, seed++);
        fa_case p;  // prefill rows (R = 8 row groups), no mask, softcap, head dims 64 and 256
        p.n_head_kv = 8;
        p.gqa = 2;
        p.n_tps = 5;
        p.no_mask = true;
        p.softcap = 5.0f;
        p.scale = 1.0f;
        for (int64_t hd : {64, 256}) {
            p.head_dim = hd;
            run_fa(p, *gpu, cpu, seed++);
        }
    }
}

namespace {

// cells and tokens also use seq ids 200..255, the seq set's high words
test::mask_stream_data random_stream(std::mt19937 & rng, int64_t n_kv, int64_t n_tps) {
    return test::random_stream(rng, n_kv, n_tps, true);
}

}  // namespace

TEST_CASE("CUDA KQ mask build and incremental update are bit-exact with the CPU backend") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(1);
    std::mt19937 rng(3);
    for (swa_type sw : {swa_type::none, swa_type::standard, swa_type::chunked, swa_type::symmetric}) {
        for (bool alibi : {false, true}) {
            for (ggml_type mt : {ggml_type::f16, ggml_type::f32}) {
                kq_mask_desc d;
                d.type = mt;
                d.n_kv = 777;
                d.n_tps = 3;
                d.n_stream = 2;
                d.swa = sw;
                d.n_swa = sw == swa_type::none ? 0 : 16 + rng() % 100;
                d.alibi = alibi;
                d.causal = rng() % 4 != 0;
                std::vector<test::mask_stream_data> sd;
                std::vector<kq_mask_stream> views(2);
                for (int s = 0; s < 2; ++s) sd.push_back(random_stream(rng, d.n_kv, d.n_tps));
                for (int s = 0; s < 2; ++s) views[s] = sd[s].view();
                const size_t n = (size_t) (d.n_kv * d.n_tps * d.n_stream) * (mt == ggml_type::f16 ? 2 : 4);
                std::vector<char> host(n), got(n);
                cuda_buffer dm(n);
                cpu.build_kq_mask(d, views.data(), host.data());
                gpu->build_kq_mask(d, views.data(), dm.data());
                dm.download(got.data(), n);
                REQUIRE(got == host);
                for (int step = 0; step < 40; ++step) {
                    std::vector<kq_mask_change> ch(2);
                    for (int s = 0; s < 2; ++s) {
                        auto & st = sd[(size_t) s];
                        ch[(size_t) s].prev_tok_pos = st.tok_pos;
                        ch[(size_t) s].prev_tok_seq = st.tok_seq;
                        const int edits = (int) (rng() % 6);
                        for (int e = 0; e < edits; ++e) {
                            const uint32_t j = rng() % (uint32_t) d.n_kv;
                            st.cell_pos[j] = rng() % 4 == 0 ? -1 : (llama_pos) (rng() % 1200);
                            st.cell_seq[j].reset();
                            if (st.cell_pos[j] >= 0) st.cell_seq[j].set(rng() % 4);
                            ch[(size_t) s].cells.push_back(j);
                        }
                        for (int64_t i = 0; i < d.n_tps; ++i) {
                            st.tok_pos[(size_t) i] += (llama_pos) (rng() % 3);
                            if (rng() % 10 == 0) st.tok_seq[(size_t) i] = (llama_seq_id) (rng() % 4);
                        }
                        views[(size_t) s] = st.view();
                    }
                    cpu.update_kq_mask(d, views.data(), ch.data(), host.data());
                    gpu->update_kq_mask(d, views.data(), ch.data(), dm.data());
                    dm.download(got.data(), n);
                    INFO("swa " << (int) sw << " alibi " << alibi << " step " << step);
                    REQUIRE(got == host);
                }
            }
        }
    }
}

namespace {

// K-shift of one cache on both backends; compares the rows as f32. Quantized K: requantization may land one step
// apart where the CPU and GPU RoPE (cosf/sinf ulps) straddle a rounding boundary, so the bound is one
// quantization step of the block and at most 1 % of the elements may differ at all.
void run_kshift(ggml_type t, int64_t head_dim, bool rot, rope_mode mode, int n_rot, float ext_factor, attn_backend & gpu,
                cpu_backend & cpu) {
    const int64_t n_head_kv = 4, kv_size = 300, n_stream = 2;
    dev_tensor k(t, head_dim, n_head_kv, kv_size, n_stream);
    const int rot_n = rot ? hadamard_size_k(head_dim) : 0;
    for (int64_t s = 0; s < n_stream; ++s) {
        for (int64_t j = 0; j < kv_size; ++j) write_kv_cell(k.host, s, j, 1, kv_which::k, 0, (llama_pos) j, rot_n);
    }
    k.upload();
    std::vector<int32_t> shift((size_t) (kv_size * n_stream));
    for (size_t i = 0; i < shift.size(); ++i) shift[i] = i % 3 == 0 ? 0 : -(int32_t) (i % 1000);
    cuda_buffer dshift = to_device(shift);
    kshift_desc d;
    d.rope.n_rot = n_rot;
    d.rope.mode = mode;
    d.rope.freq_base = 500000.0f;
    d.rope.ext_factor = ext_factor;
    d.rope.freq_scale = ext_factor != 0.0f ? 0.25f : 1.0f;
    d.rope.n_ctx_orig = 8192;
    d.rot.n_k = rot_n;
    d.on_null_rot = null_rot_policy::plain;
    const kshift_report rg = gpu.k_shift(d, k.dev, static_cast<const int32_t *>(dshift.data()));
    const kshift_report rc = cpu.k_shift(d, k.host, shift.data());
    CHECK(rg.cells == rc.cells);
    CHECK(rg.null_rotation_hazard == rc.null_rotation_hazard);
    std::vector<char> cpu_bytes = k.hbuf;
    k.download();
    const int64_t n = head_dim * n_head_kv;
    std::vector<float> a((size_t) n), b((size_t) n);
    double max_err = 0.0, max_step = 0.0;
    int64_t differ = 0;
    for (int64_t c = 0; c < kv_size * n_stream; ++c) {
        row_to_f32(t, cpu_bytes.data() + c * k.host.row_bytes(), a.data(), n);
        row_to_f32(t, k.hbuf.data() + c * k.host.row_bytes(), b.data(), n);
        for (int64_t e = 0; e < n; ++e) {
            const double diff = std::fabs((double) a[(size_t) e] - b[(size_t) e]);
            max_err = std::max(max_err, diff);
            differ += diff > 0.0;
        }
        if (ggml_is_quantized(t)) {  // largest quantization step of the row's blocks
            for (int64_t blk = 0; blk < n / 32; ++blk) {
                float amax = 0.0f;
                for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(a[(size_t) (blk * 32 + e)]));
                max_step = std::max(max_step, (double) amax / (t == ggml_type::q8_0 ? 127.0 : 7.0));
            }
        }
    }
    INFO("type " << ggml_type_name(t) << " hd " << head_dim << " rot " << rot << " max_err " << max_err << " differ " << differ);
    if (t == ggml_type::f32) CHECK(max_err <= 1e-5);
    if (t == ggml_type::f16) CHECK(max_err <= 2e-3);
    if (ggml_is_quantized(t)) {
        CHECK(max_err <= 1.01 * max_step);
        CHECK(differ * 100 <= n * kv_size * n_stream);
    }
}

}  // namespace

TEST_CASE("CUDA K-shift matches the CPU backend, plain and quantized with Hadamard rotation") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    for (int64_t hd : {64, 128, 256}) {
        run_kshift(ggml_type::f32, hd, false, rope_mode::norm, (int) hd, 0.0f, *gpu, cpu);
        run_kshift(ggml_type::f16, hd, false, rope_mode::neox, (int) hd, 0.0f, *gpu, cpu);
        run_kshift(ggml_type::q8_0, hd, true, rope_mode::neox, (int) hd, 0.0f, *gpu, cpu);
        run_kshift(ggml_type::q4_0, hd, true, rope_mode::norm, (int) hd, 1.0f, *gpu, cpu);
    }
    run_kshift(ggml_type::q8_0, 128, false, rope_mode::norm, 64, 0.0f, *gpu, cpu);  // plain path, partial n_rot
    run_kshift(ggml_type::f16, 128, false, rope_mode::neox, 64, 1.0f, *gpu, cpu);
}

TEST_CASE("CUDA K-shift refuses the null-rotation hazard like the CPU backend") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    dev_tensor k(ggml_type::q8_0, 128, 2, 8, 1);
    cuda_buffer shift(8 * 4);
    kshift_desc d;
    d.rope.n_rot = 128;
    CHECK_THROWS_AS(gpu->k_shift(d, k.dev, static_cast<const int32_t *>(shift.data())), usage_error);
}

TEST_CASE("CUDA helpers: copy bandwidth and event timing give positive figures") {
    REQUIRE_CUDA_DEVICE();
    const bandwidth_result bw = cuda_copy_bandwidth(64u << 20, 5);
    CHECK(bw.copy_gbs > 0.0);
    cuda_buffer b(1 << 20);
    const cuda_timing t = cuda_time_ms([&] { b.upload(std::vector<char>(1 << 20).data(), 1 << 20); }, 1, 3, true);
    CHECK(t.n == 3);
    CHECK(t.min_ms <= t.median_ms);
}

// One small case per KV type and kernel, asynchronous backend included: the set scripts/gpu-check.sh runs under
// compute-sanitizer --tool memcheck and --tool racecheck (the cases above take minutes there).
TEST_CASE("CUDA sanitizer set: small flash attention per KV type, K-shift, the replay's event timer") {
    REQUIRE_CUDA_DEVICE();
    auto gpu = make_cuda_backend();
    cpu_backend cpu(2);
    uint32_t seed = 100;
    for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        fa_case c;
        c.tk = c.tv = t;
        c.n_kv = 300;
        c.n_tps = 2;
        c.n_stream = 2;
        c.rot = ggml_is_quantized(t);
        run_fa(c, *gpu, cpu, seed++);
    }
    run_kshift(ggml_type::q8_0, 128, true, rope_mode::neox, 128, 0.0f, *gpu, cpu);
    // kernel_hooks' CUDA clock (kernel_drive::time_ns): events around enqueued work after the L2 flush
    const auto timer = cuda_event_timer(true);
    cuda_buffer b(1 << 20);
    const std::vector<char> host(1 << 20, 1);
    for (int i = 0; i < 2; ++i) CHECK(timer([&] { b.upload(host.data(), host.size()); }) >= 0.0);
}

#endif
