// kshift_vs_ggml: kvsim's CPU K-shift against llama.cpp's own, same process, same minute, same K bytes.
//
// llama.cpp's side is the graph llama_kv_cache::build_graph_shift builds for one layer (src/llama-kv-cache.cpp,
// build_rope_shift), run on the prebuilt ggml CPU backend (the ISA variant llama.cpp itself loads):
//   f16 K:          ggml_rope_ext_inplace on the cache's K view [n_rot, n_head_kv, n_cells];
//   q8_0/q4_0 K:    ggml_cast to f32, Hadamard (ggml_mul_mat with GGML_HINT_SRC0_IS_HADAMARD: ggml's FWHT), RoPE,
//                   Hadamard, ggml_cpy back into the quantized cache (llama.cpp rotates a quantized K by default,
//                   attn_rot_k; kvsim's kshift_desc.rot.n_k = 128 is the same rotation).
// kvsim's side is cpu_backend::k_shift on a copy of the same bytes. Llama-3-8B K (head_dim 128, n_head_kv 8,
// NORMAL RoPE, freq_base 500000, n_ctx_orig 8192), one delta for every cell (a context shift), both with the same
// thread count. Optional arguments: freq_scale, ext_factor and attn_factor as a llama_context with --rope-scaling
// resolves them (e.g. YaRN x4: 0.25 1 1; linear x2: 0.5 0 1), given to both sides.
//
// Output: per type, whether the first call's K is bit-identical, then the interleaved timed calls (ggml, kvsim,
// ggml, kvsim, ...) and their median ms, spread (min-max) and the median ratio ggml / kvsim. Build and run:
// scripts/kshift-vs-ggml.sh.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml_cpu.h"

#include "cpu/cpu_backend.h"
#include "hadamard.h"

namespace {

constexpr int64_t head_dim = 128, n_head_kv = 8;
constexpr int32_t delta = -2048;  // the context shift every cell gets

using ggml_tools::kvsim_type;
using ggml_tools::median;
using ggml_tools::now_ms;

struct ggml_side {
    ggml_backend_t backend = nullptr;
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    ggml_tensor * k = nullptr;
    ggml_cgraph * graph = nullptr;
};

struct rope_args {
    float freq_scale = 1.0f, ext_factor = 0.0f, attn_factor = 1.0f;
};

// The graph of build_rope_shift for one layer's K of n_cells cells of type t.
void build_graph(ggml_side & g, ggml_type t, int64_t n_cells, const rope_args & ra) {
    ggml_init_params ip = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    g.ctx = ggml_init(ip);
    g.k = ggml_new_tensor_2d(g.ctx, t, head_dim * n_head_kv, n_cells);
    ggml_tensor * shift = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, n_cells);
    ggml_tensor * rot = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F32, head_dim, head_dim);
    ggml_tensor * view = ggml_view_3d(g.ctx, g.k, head_dim, n_head_kv, n_cells, ggml_row_size(t, head_dim),
                                      ggml_row_size(t, head_dim * n_head_kv), 0);
    const auto rope = [&](ggml_tensor * x, bool inplace) {
        auto * f = inplace ? ggml_rope_ext_inplace : ggml_rope_ext;
        return f(g.ctx, x, shift, nullptr, (int) head_dim, 0, 8192, 500000.0f, ra.freq_scale, ra.ext_factor, ra.attn_factor, 32.0f, 1.0f);
    };
    const auto hadamard = [&](ggml_tensor * x) {  // llama_mul_mat_hadamard (src/llama-impl.h)
        ggml_tensor * r = ggml_mul_mat(g.ctx, rot, ggml_reshape_2d(g.ctx, x, head_dim, ggml_nelements(x) / head_dim));
        ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
        return ggml_reshape_4d(g.ctx, r, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
    };
    ggml_tensor * out;
    if (ggml_is_quantized(t)) {
        ggml_tensor * x = ggml_cast(g.ctx, view, GGML_TYPE_F32);
        out = ggml_cpy(g.ctx, hadamard(rope(hadamard(x), false)), view);
    } else {
        out = rope(view, true);
    }
    g.graph = ggml_new_graph(g.ctx);
    ggml_build_forward_expand(g.graph, out);
    g.buf = ggml_backend_alloc_ctx_tensors(g.ctx, g.backend);
    std::vector<int32_t> s((size_t) n_cells, delta);
    ggml_backend_tensor_set(shift, s.data(), 0, ggml_nbytes(shift));
    std::vector<float> h((size_t) (head_dim * head_dim));  // normalised Sylvester Hadamard (ggml_gen_hadamard)
    for (int64_t i = 0; i < head_dim; ++i)
        for (int64_t j = 0; j < head_dim; ++j)
            h[(size_t) (i * head_dim + j)] = (__builtin_popcountll(i & j) % 2 ? -1.0f : 1.0f) / std::sqrt((float) head_dim);
    ggml_backend_tensor_set(rot, h.data(), 0, ggml_nbytes(rot));
}

// K of n_cells cells (ggml_tools::fill_random_rows).
std::vector<uint8_t> make_k(ggml_type t, int64_t n_cells) {
    std::vector<uint8_t> k(ggml_row_size(t, head_dim * n_head_kv) * (size_t) n_cells);
    ggml_tools::fill_random_rows(t, n_cells, head_dim * n_head_kv, 1234, k.data());
    return k;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s GGML_LIBDIR [n_cells=65536] [threads=2] [reps=7] [freq_scale=1] [ext_factor=0] [attn_factor=1]\n", argv[0]);
        return 2;
    }
    using ggml_tools::float_arg;
    using ggml_tools::int_arg;
    const int64_t n_cells = argc > 2 ? int_arg("n_cells", argv[2], 1, 1 << 24) : 65536;
    const int n_threads = argc > 3 ? (int) int_arg("threads", argv[3], 1, 1024) : 2;
    const int reps = argc > 4 ? (int) int_arg("reps", argv[4], 1, 1000000) : 7;
    rope_args ra;
    if (argc > 5) ra.freq_scale = float_arg("freq_scale", argv[5]);
    if (argc > 6) ra.ext_factor = float_arg("ext_factor", argv[6]);
    if (argc > 7) ra.attn_factor = float_arg("attn_factor", argv[7]);
    if (!(ra.freq_scale > 0)) ggml_tools::bad_argument("freq_scale", argv[5], "> 0");
    const ggml_tools::cpu_device dev(argv[1]);
    kvsim::cpu_backend kv(n_threads);
    std::printf("# K-shift of one layer's K (%lld cells, %lld heads x %lld, delta %d, freq_scale %g, ext_factor %g, attn_factor %g), "
                "%d threads, %d interleaved calls each\n", (long long) n_cells, (long long) n_head_kv, (long long) head_dim, delta,
                ra.freq_scale, ra.ext_factor, ra.attn_factor, n_threads, reps);
    std::printf("type,identical,ggml_ms_median,ggml_ms_min,ggml_ms_max,kvsim_ms_median,kvsim_ms_min,kvsim_ms_max,ggml_over_kvsim\n");

    bool all_identical = true;
    for (ggml_type t : {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}) {
        ggml_tools::cpu_device::backend be = dev.make_backend(n_threads);
        ggml_side g;
        g.backend = be.be;
        build_graph(g, t, n_cells, ra);

        const std::vector<uint8_t> k0 = make_k(t, n_cells);
        std::vector<uint8_t> kk = k0, kg(k0.size()), kk_first;
        ggml_backend_tensor_set(g.k, k0.data(), 0, k0.size());
        kvsim::kv_tensor kt;
        kt.data = kk.data();
        kt.type = kvsim_type(t);
        kt.head_dim = head_dim;
        kt.n_head_kv = n_head_kv;
        kt.kv_size = n_cells;
        kvsim::kshift_desc d;
        d.rope.n_rot = (int) head_dim;
        d.rope.freq_base = 500000.0f;
        d.rope.n_ctx_orig = 8192;
        d.rope.freq_scale = ra.freq_scale;
        d.rope.ext_factor = ra.ext_factor;
        d.rope.attn_factor = ra.attn_factor;
        d.rot.n_k = ggml_is_quantized(t) ? kvsim::hadamard_size_k(head_dim) : 0;
        const std::vector<int32_t> shift((size_t) n_cells, delta);

        std::vector<double> tg, tk;
        for (int i = 0; i < reps + 1; ++i) {  // call 0: the bit-identity check (and warm-up), not timed
            double t0 = now_ms();
            ggml_backend_graph_compute(g.backend, g.graph);
            dev.pause(be.pool);  // its polling workers would share the cores with kvsim's call
            const double t1 = now_ms();
            kv.k_shift(d, kt, shift.data());
            const double t2 = now_ms();
            if (i == 0) {
                ggml_backend_tensor_get(g.k, kg.data(), 0, kg.size());
                kk_first = kk;
                continue;
            }
            tg.push_back(t1 - t0);
            tk.push_back(t2 - t1);
        }
        size_t n_diff = 0;
        for (size_t i = 0; i < kg.size(); ++i) n_diff += kg[i] != kk_first[i];
        const bool identical = n_diff == 0;
        std::printf("%s,%s,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", ggml_type_name(t),
                    identical ? "yes" : ("no (" + std::to_string(n_diff) + " bytes differ)").c_str(), median(tg),
                    *std::min_element(tg.begin(), tg.end()), *std::max_element(tg.begin(), tg.end()), median(tk),
                    *std::min_element(tk.begin(), tk.end()), *std::max_element(tk.begin(), tk.end()),
                    median(tg) / median(tk));
        std::fflush(stdout);
        all_identical &= identical;
        ggml_backend_buffer_free(g.buf);
        ggml_free(g.ctx);
        dev.release(be);
    }
    return all_identical ? 0 : 1;  // ggml's output and kvsim's differ: the check failed
}
