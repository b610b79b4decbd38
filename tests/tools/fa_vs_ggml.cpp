// fa_vs_ggml: kvsim's CPU decode flash attention against llama.cpp's own, same process, same K/V bytes, and this
// process's read bandwidth in the same minute (issue 29's ratios measured in one run).
//
// llama.cpp's side is the node build_attn_mha adds for one layer of a decode step (src/llama-graph.cpp): Q
// [head_dim, n_head, 1] permuted to [head_dim, 1, n_head]; K and V the cache's views [head_dim, n_head_kv, n_kv]
// (rows of n_head_kv heads per cell, llama_kv_cache::get_k/get_v with flash attention) permuted to
// [head_dim, n_kv, n_head_kv]; an f16 mask of zeros [n_kv, 1]; ggml_flash_attn_ext with scale 1/sqrt(head_dim), run
// on the prebuilt ggml CPU backend with a persistent polling threadpool. The K/V tensors are placed on the very
// buffers kvsim's cpu_backend::flash_attn reads (ggml_backend_dev_buffer_from_host_ptr). Llama-3-8B heads
// (head_dim 128, 32 query heads, 8 KV heads), one sequence, K and V of one type.
//
// Each point: one call of each on the same bytes, outputs compared (max abs difference; ggml rounds Q to K's
// vec_dot_type, f16 for an f16 K, and accumulates an f16 V in f16, so f16 outputs differ by about 1e-3); then
// `rounds` rounds of: a read pass of kvsim's probe (kernels/bandwidth.h, best of 3), a burst of `calls` calls of
// one kernel and then of the other (which goes first alternates by round), each burst after one untimed call so
// that both run with their threads awake, as in a decode step where attention follows the layer's matrix products.
// K/V copies are rotated so that at least cycle_mib (128) MiB cycle between calls (no call reads K/V from the caches).
// Output: CSV of every round, then per point the median and spread over rounds of llama.cpp / kvsim and of
// kvsim's GB/s over the read pass. Build and run: scripts/fa-vs-ggml.sh.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml_cpu.h"

#include "bandwidth.h"
#include "cpu/cpu_backend.h"
#include "reference.h"

namespace {

constexpr int64_t head_dim = 128, n_head = 32, n_head_kv = 8;

using ggml_tools::kvsim_type;
using ggml_tools::median;
using ggml_tools::now_ms;

// 4 KiB-aligned bytes (ggml places tensors only at aligned addresses); the kernels read them in place.
struct host_bytes {
    std::unique_ptr<uint8_t, void (*)(void *)> p{nullptr, std::free};
    size_t n = 0;
    explicit host_bytes(size_t bytes) : p(static_cast<uint8_t *>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)), std::free), n(bytes) {
        if (!p) throw std::bad_alloc();
    }
    uint8_t * data() const { return p.get(); }
    size_t size() const { return n; }
};

// n_cells rows of n_head_kv heads (ggml_tools::fill_random_rows), 4 KiB-aligned.
host_bytes make_rows(ggml_type t, int64_t n_cells, uint32_t seed) {
    host_bytes out(ggml_row_size(t, head_dim * n_head_kv) * (size_t) n_cells);
    ggml_tools::fill_random_rows(t, n_cells, head_dim * n_head_kv, seed, out.data());
    return out;
}

// One copy of the cache (K and V rows) with llama.cpp's graph over it.
struct ggml_copy {
    host_bytes k{0}, v{0};
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t kbuf = nullptr, vbuf = nullptr, rest = nullptr;
    ggml_cgraph * graph = nullptr;
    ggml_tensor * out = nullptr;

    void build(const ggml_tools::cpu_device & dev, ggml_backend_t be, ggml_type t, int64_t n_kv, const float * q,
               const ggml_fp16_t * mask) {
        ggml_init_params ip = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
        ctx = ggml_init(ip);
        const size_t row = ggml_row_size(t, head_dim * n_head_kv), head = ggml_row_size(t, head_dim);
        const auto cache = [&](host_bytes & bytes, ggml_backend_buffer_t & buf) {
            ggml_tensor * c = ggml_new_tensor_2d(ctx, t, head_dim * n_head_kv, n_kv);
            buf = ggml_backend_dev_buffer_from_host_ptr(dev.dev(), bytes.data(), bytes.size(), bytes.size());
            if (!buf || ggml_backend_tensor_alloc(buf, c, bytes.data()) != GGML_STATUS_SUCCESS) {
                throw std::runtime_error("ggml: cannot place the cache on the host buffer");
            }
            return ggml_permute(ctx, ggml_view_3d(ctx, c, head_dim, n_head_kv, n_kv, head, row, 0), 0, 2, 1, 3);
        };
        ggml_tensor * kp = cache(k, kbuf);
        ggml_tensor * vp = cache(v, vbuf);
        ggml_tensor * qt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head_dim, n_head, 1);
        ggml_tensor * m = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, 1);
        out = ggml_flash_attn_ext(ctx, ggml_permute(ctx, qt, 0, 2, 1, 3), kp, vp, m, 1.0f / std::sqrt((float) head_dim), 0.0f, 0.0f);
        graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, out);
        rest = ggml_backend_alloc_ctx_tensors(ctx, be);
        ggml_backend_tensor_set(qt, q, 0, ggml_nbytes(qt));
        ggml_backend_tensor_set(m, mask, 0, ggml_nbytes(m));
    }
    void release() {
        for (auto * b : {kbuf, vbuf, rest}) if (b) ggml_backend_buffer_free(b);
        if (ctx) ggml_free(ctx);
    }
};

// Median ms per call of a burst of `calls` calls of f(i) after one untimed call.
template <class F>
double burst_ms(int calls, F && f) {
    f(0);
    std::vector<double> t;
    for (int i = 1; i <= calls; ++i) {
        const double t0 = now_ms();
        f(i);
        t.push_back(now_ms() - t0);
    }
    return median(t);
}

std::vector<std::string> split(const std::string & s) {
    std::vector<std::string> out;
    size_t a = 0;
    for (size_t b; (b = s.find(',', a)) != std::string::npos; a = b + 1) out.push_back(s.substr(a, b - a));
    out.push_back(s.substr(a));
    return out;
}

// Both outputs against the double reference (kernels/reference.h, Q rounded as kvsim rounds it) and each other.
// "same": within 1e-5 of each other (float summation order: q8_0, q4_0); "f16-gap": an f16 K/V within 5 % of the
// largest output (ggml rounds Q to f16 and accumulates V in f16, kvsim keeps f32); else "DIFFER" (exit 1).
bool g_differ = false;
void check_outputs(ggml_type t, int64_t n_kv, const kvsim::fa_desc & d, const kvsim::fa_args & ref_args,
                   kvsim::ggml_type q_dot, const std::vector<float> & out_g, const std::vector<float> & out_kv) {
    kvsim::ref_flash_attn(d, ref_args, q_dot);
    const float * ref = ref_args.out;
    double diff = 0, err_g = 0, err_kv = 0, amax = 0;
    for (size_t i = 0; i < out_g.size(); ++i) {
        diff = std::max(diff, (double) std::fabs(out_g[i] - out_kv[i]));
        err_g = std::max(err_g, (double) std::fabs(out_g[i] - ref[i]));
        err_kv = std::max(err_kv, (double) std::fabs(out_kv[i] - ref[i]));
        amax = std::max(amax, (double) std::fabs(ref[i]));
    }
    const char * verdict = !std::isfinite(diff)                          ? "DIFFER"
                           : diff <= 1e-5                                ? "same"
                           : t == GGML_TYPE_F16 && diff <= 0.05 * amax   ? "f16-gap"
                                                                         : "DIFFER";
    g_differ |= std::strcmp(verdict, "DIFFER") == 0;
    std::printf("check,%s,%lld,%.3g,%.3g,%.3g,%.3g,%s\n", ggml_type_name(t), (long long) n_kv, diff, err_g, err_kv, amax,
                verdict);
}

struct point_result {
    std::vector<double> speedup, of_read;
};

point_result run_point(const ggml_tools::cpu_device & dev, const ggml_tools::cpu_device::backend & be, kvsim::cpu_backend & kv,
                       kvsim::read_probe & probe, ggml_type t, int64_t n_kv, size_t cycle_bytes, int rounds, int calls) {
    const size_t row = ggml_row_size(t, head_dim * n_head_kv);
    const size_t kv_bytes = 2 * row * (size_t) n_kv;
    const int copies = (int) std::max<size_t>(1, (cycle_bytes + kv_bytes - 1) / kv_bytes);
    std::vector<float> q((size_t) (head_dim * n_head));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (float & x : q) x = nd(rng);
    const std::vector<ggml_fp16_t> mask((size_t) n_kv, ggml_fp32_to_fp16(0.0f));
    std::vector<ggml_copy> cp((size_t) copies);
    for (int c = 0; c < copies; ++c) {
        cp[(size_t) c].k = make_rows(t, n_kv, 100 + c);
        cp[(size_t) c].v = make_rows(t, n_kv, 200 + c);
        cp[(size_t) c].build(dev, be.be, t, n_kv, q.data(), mask.data());
    }
    kvsim::fa_desc d;
    d.head_dim_k = d.head_dim_v = head_dim;
    d.n_head = n_head;
    d.n_head_kv = n_head_kv;
    d.n_kv = n_kv;
    d.scale = 1.0f / std::sqrt((float) head_dim);
    const kvsim::fa_plan plan = kv.plan_flash_attn(d);
    std::vector<float> out_kv((size_t) (head_dim * n_head)), out_g(out_kv.size());
    std::vector<float> out_ref(out_kv.size());
    const auto kvsim_args = [&](int i, float * out) {
        ggml_copy & c = cp[(size_t) (i % copies)];
        kvsim::kv_tensor kt{c.k.data(), kvsim_type(t), head_dim, n_head_kv, n_kv, 1};
        kvsim::kv_tensor vt{c.v.data(), kvsim_type(t), head_dim, n_head_kv, n_kv, 1};
        return kvsim::fa_args{q.data(), kt, vt, 0, mask.data(), kvsim::ggml_type::f16, out};
    };
    const auto kvsim_call = [&](int i) { kv.flash_attn(d, plan, kvsim_args(i, out_kv.data())); };
    const auto ggml_call = [&](int i) { ggml_backend_graph_compute(be.be, cp[(size_t) (i % copies)].graph); };
    // ggml's workers poll after each graph: parked after its burst so that they do not share the cores with kvsim's
    const auto ggml_burst = [&] {
        const double ms = burst_ms(calls, ggml_call);
        dev.pause(be.pool);
        return ms;
    };

    for (int c = copies - 1; c >= 0; --c) {  // every copy's graph planned and its pages touched by both before timing
        ggml_call(c);
        kvsim_call(c);
    }
    dev.pause(be.pool);
    ggml_backend_tensor_get(cp[0].out, out_g.data(), 0, out_g.size() * sizeof(float));
    check_outputs(t, n_kv, d, kvsim_args(0, out_ref.data()), kv.fa_q_dot_type(kvsim_type(t)), out_g, out_kv);
    point_result r;
    for (int round = 0; round < rounds; ++round) {
        double rd = 0;
        for (int p = 0; p < 3; ++p) rd = std::max(rd, probe.read_gbs());
        double g_ms, k_ms;
        if (round % 2 == 0) {
            g_ms = ggml_burst();
            k_ms = burst_ms(calls, kvsim_call);
        } else {
            k_ms = burst_ms(calls, kvsim_call);
            g_ms = ggml_burst();
        }
        const double k_gbs = (double) kv_bytes / (k_ms * 1e6);
        r.speedup.push_back(g_ms / k_ms);
        r.of_read.push_back(k_gbs / rd);
        std::printf("round,%s,%lld,%d,%d,%.1f,%.3f,%.3f,%.2f,%.1f,%.2f\n", ggml_type_name(t), (long long) n_kv, round,
                    copies, rd, g_ms, k_ms, g_ms / k_ms, k_gbs, k_gbs / rd);
        std::fflush(stdout);
    }
    for (auto & c : cp) c.release();
    return r;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s GGML_LIBDIR [n_kv=16384,65536] [threads=2] [rounds=3] [calls=10] [types=f16,q8_0,q4_0] [cycle_mib=128]\n",
                     argv[0]);
        return 2;
    }
    using ggml_tools::int_arg;
    std::vector<int64_t> ctxs;  // every argument checked before anything runs
    for (const std::string & c : split(argc > 2 ? argv[2] : "16384,65536")) ctxs.push_back(int_arg("n_kv", c.c_str(), 256, 1 << 24));
    const int n_threads = argc > 3 ? (int) int_arg("threads", argv[3], 1, 1024) : 2;
    const int rounds = argc > 4 ? (int) int_arg("rounds", argv[4], 1, 1000) : 3;
    const int calls = argc > 5 ? (int) int_arg("calls", argv[5], 1, 100000) : 10;
    std::vector<std::pair<std::string, ggml_type>> types;
    for (const std::string & tn : split(argc > 6 ? argv[6] : "f16,q8_0,q4_0")) {
        const ggml_type t = tn == "f16" ? GGML_TYPE_F16 : tn == "q8_0" ? GGML_TYPE_Q8_0 : tn == "q4_0" ? GGML_TYPE_Q4_0 : GGML_TYPE_COUNT;
        if (t == GGML_TYPE_COUNT) ggml_tools::bad_argument("type", tn.c_str(), "f16, q8_0 or q4_0");
        types.emplace_back(tn, t);
    }
    const long long cycle_mib = argc > 7 ? int_arg("cycle_mib", argv[7], 0, 1 << 16) : 128;
    try {
        const ggml_tools::cpu_device dev(argv[1]);
        ggml_tools::cpu_device::backend be = dev.make_backend(n_threads);
        kvsim::cpu_backend kv(n_threads);
        kvsim::read_probe probe((size_t) 512 << 20, n_threads);  // kvbench's probe size
        if (!dev.pause(be.pool)) std::printf("# note: ggml_threadpool_pause not found: ggml's polling workers may slow kvsim's bursts\n");
        std::printf("# decode flash attention, Llama-3-8B heads, one sequence, %d threads each; llama.cpp: %s; kvsim: %s\n",
                    n_threads, ggml_tools::cpu_device::variant().c_str(), kv.path_name().c_str());
        std::printf("check,type,n_kv,max_abs_diff,ggml_err_vs_ref,kvsim_err_vs_ref,max_abs_out,verdict\n");
        std::printf("round,type,n_kv,round,copies,read_gbs,ggml_ms,kvsim_ms,ggml_over_kvsim,kvsim_gbs,kvsim_of_read\n");
        std::vector<std::string> summary;
        for (const auto & [tn, t] : types) {
            for (const int64_t n_kv : ctxs) {
                const point_result r = run_point(dev, be, kv, probe, t, n_kv, (size_t) cycle_mib << 20, rounds, calls);
                const auto mm = [](const std::vector<double> & v) {
                    char b[96];
                    std::snprintf(b, sizeof b, "%.2f,%.2f,%.2f", median(v), *std::min_element(v.begin(), v.end()),
                                  *std::max_element(v.begin(), v.end()));
                    return std::string(b);
                };
                summary.push_back(tn + "," + std::to_string(n_kv) + "," + mm(r.speedup) + "," + mm(r.of_read));
            }
        }
        std::printf("summary,type,n_kv,ggml_over_kvsim_median,min,max,kvsim_of_read_median,min,max\n");
        for (const auto & s : summary) std::printf("summary,%s\n", s.c_str());
        dev.release(be);
        if (g_differ) {
            std::fprintf(stderr, "fa_vs_ggml: kvsim's output differs from llama.cpp's (check rows)\n");
            return 1;
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "fa_vs_ggml: %s\n", e.what());
        return 1;
    }
    return 0;
}
