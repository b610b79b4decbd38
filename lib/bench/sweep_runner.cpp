#include "bench/sweep_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>

#include "bandwidth.h"
#include "core/errors.h"
#include "cpu/eigen_attention.h"
#include "bytes.h"
#include "bench/machine_probe.h"
#include "cpu/cpu_backend.h"
#include "hadamard.h"
#include "kv_content.h"
#include "quant.h"
#include "reference.h"
#include "util/nvtx.h"
#include "util/sample_stats.h"

namespace kvsim {

double max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size()) {
        throw std::invalid_argument(fmt::format("max_abs_diff: {} values vs {}", a.size(), b.size()));
    }
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs((double) a[i] - (double) b[i]);
        if (std::isnan(d)) return NAN;  // std::max(m, NaN) would return m: a NaN output would pass
        m = std::max(m, d);
    }
    return m;
}

double fa_tolerance(ggml_type tk, ggml_type tv) { return tk == ggml_type::f32 && tv == ggml_type::f32 ? 2e-5 : 1e-4; }

bool within_tolerance(double err, ggml_type tk, ggml_type tv) { return err >= 0 && err <= fa_tolerance(tk, tv); }

int sweep_exit_code(const sweep_output & o) {
    const bool failed = std::any_of(o.results.begin(), o.results.end(),
                                    [](const point_result & r) { return r.status == point_status::failed; });
    return failed ? 1 : 0;
}

namespace {

// Uninitialised 64-byte-aligned host memory (a vector would memset gigabytes before the content fill).
struct host_buffer {
    std::unique_ptr<char, decltype(&std::free)> p{nullptr, &std::free};
    explicit host_buffer(size_t bytes) : p(static_cast<char *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), &std::free) {
        if (!p) throw std::bad_alloc();
    }
    char * data() const { return p.get(); }
};

// How a point times a kernel: the one timing loop (spec: warm-up, repeats, stop flag) with the run's clock (empty:
// the host clock), as per-call time statistics.
struct point_timer {
    loop_spec spec;
    call_clock clock;
    time_stats operator()(const std::function<void(int)> & call) const { return time_stats_of(time_loop(spec, call, clock)); }
};

bool on_host(const attn_backend & be) { return be.kind() == backend_kind::cpu; }

// Backend memory holding a copy of `bytes` host bytes. On the CPU backend it is the host memory itself (a
// non-owning pointer: K/V of a point can be gigabytes, not worth doubling); kernels writing to it write the host copy.
std::shared_ptr<void> backend_copy(attn_backend & be, const void * host, size_t bytes) {
    if (on_host(be)) return std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<void *>(host));
    std::shared_ptr<void> p = be.alloc(bytes);
    be.upload(p.get(), host, bytes);
    return p;
}

// Host copy of backend memory (nothing to copy when it already is the host memory).
void fetch(attn_backend & be, void * host, const void * src, size_t bytes) {
    if (host != src) be.download(host, src, bytes);
}

int copies_for(size_t bytes_one, size_t rotate_bytes) {
    return (int) std::max<size_t>(1, (rotate_bytes + bytes_one - 1) / bytes_one);
}

// copies x batch streams of ctx cells: stream s of copy 0 holds sequence s at positions 0..ctx-1; later copies are
// byte copies of copy 0 (same content, other addresses).
void fill_cache(const kv_tensor & t, int64_t batch, int copies, kv_which which, int rot_n, thread_pool & pool) {
    const int64_t block = 512;
    const int64_t n_blocks = (t.kv_size + block - 1) / block;
    pool.parallel_for(batch * n_blocks, [&](int64_t task, int) {
        const int64_t s = task / n_blocks, j0 = (task % n_blocks) * block;
        for (int64_t j = j0; j < std::min(t.kv_size, j0 + block); ++j) {
            write_kv_cell(t, s, j, 0, which, (llama_seq_id) s, (llama_pos) j, rot_n);
        }
    });
    const size_t copy_bytes = t.stream_bytes() * (size_t) batch;
    for (int c = 1; c < copies; ++c) std::memcpy(t.row(c * batch, 0), t.data, copy_bytes);
}

kv_tensor copy_view(const kv_tensor & all, int64_t batch, int c) {
    kv_tensor v = all;
    v.data = all.row(c * batch, 0);
    v.n_stream = batch;
    return v;
}

// Cell metadata and tokens of the point: stream s holds sequence s in cells 0..ctx-1 at pos = cell; the decoded
// token sits at pos ctx-1.
struct mask_inputs {
    std::vector<llama_pos> cell_pos;
    std::vector<std::vector<seq_set>> cell_seq;  // per stream
    std::vector<llama_pos> tok_pos;
    std::vector<llama_seq_id> tok_seq;
    std::vector<kq_mask_stream> streams;

    mask_inputs(int64_t ctx, int64_t batch) : cell_pos((size_t) ctx), cell_seq((size_t) batch) {
        for (int64_t j = 0; j < ctx; ++j) cell_pos[(size_t) j] = (llama_pos) j;
        for (int64_t s = 0; s < batch; ++s) {
            cell_seq[(size_t) s].resize((size_t) ctx);
            for (auto & b : cell_seq[(size_t) s]) b.set((size_t) s);
            tok_pos.push_back((llama_pos) ctx - 1);
            tok_seq.push_back((llama_seq_id) s);
        }
        for (int64_t s = 0; s < batch; ++s) {
            streams.push_back({cell_pos.data(), cell_seq[(size_t) s].data(), &tok_pos[(size_t) s], &tok_seq[(size_t) s]});
        }
    }
};

// Full build, then the incremental update for one new token (cell ctx-1 gets pos ctx-1, the token moves from
// ctx-2 to ctx-1), timed on a copy of the previous mask. Repeating the update on its own result does the same
// work (the same cells rewritten with the same values), so no restore sits between the timed calls. Returns the
// full mask in backend memory.
std::shared_ptr<void> time_masks(attn_backend & be, const sweep_point & p, const point_timer & timed, point_result & r) {
    kq_mask_desc md;
    md.n_kv = p.ctx;
    md.n_tps = 1;
    md.n_stream = p.batch;
    md.type = ggml_type::f16;
    mask_inputs in(p.ctx, p.batch);
    const size_t bytes = (size_t) (p.ctx * p.batch) * sizeof(uint16_t);
    std::shared_ptr<void> mask = be.alloc(bytes);
    r.mask_full = timed([&](int) { be.build_kq_mask(md, in.streams.data(), mask.get()); });
    if (p.ctx < 2) return mask;

    const size_t last = (size_t) p.ctx - 1;
    std::shared_ptr<void> upd = be.alloc(bytes);
    in.cell_pos[last] = -1;
    for (auto & cs : in.cell_seq) cs[last].reset();
    for (auto & tp : in.tok_pos) tp = (llama_pos) p.ctx - 2;
    be.build_kq_mask(md, in.streams.data(), upd.get());
    in.cell_pos[last] = (llama_pos) last;
    for (size_t s = 0; s < in.cell_seq.size(); ++s) in.cell_seq[s][last].set(s);
    for (auto & tp : in.tok_pos) tp = (llama_pos) last;

    std::vector<kq_mask_change> ch((size_t) p.batch);
    for (int64_t s = 0; s < p.batch; ++s) {
        ch[(size_t) s] = {{(uint32_t) last}, {(llama_pos) p.ctx - 2}, {(llama_seq_id) s}};
    }
    r.mask_update = timed([&](int) { be.update_kq_mask(md, in.streams.data(), ch.data(), upd.get()); });
    std::vector<uint16_t> full(bytes / 2), inc(bytes / 2);
    be.download(full.data(), mask.get(), bytes);
    be.download(inc.data(), upd.get(), bytes);
    if (inc != full) throw std::runtime_error("kvbench: incremental KQ mask differs from the full build");
    return mask;
}

void time_eigen(const sweep_config & c, const sweep_point & p, const fa_desc & fd, const kv_tensor & k0,
                const kv_tensor & v0, const std::vector<float> & q, ggml_type q_dot, const std::vector<float> & kernel_out,
                thread_pool & pool, const point_timer & timed, point_result & r) {
    const int64_t row = c.head_dim * c.n_head_kv;
    const size_t f32_bytes = (size_t) (p.ctx * p.batch * row) * 2 * sizeof(float);
    if (f32_bytes > c.eigen_max_bytes) {
        r.note += fmt::format("{}Eigen skipped (f32 K+V {} MiB > {} MiB)", r.note.empty() ? "" : "; ", f32_bytes >> 20,
                              c.eigen_max_bytes >> 20);
        return;
    }
    const int copies = copies_for(f32_bytes, c.rotate_bytes);
    const size_t n_one = (size_t) (p.ctx * p.batch * row);
    std::vector<float> kf(n_one * (size_t) copies), vf(n_one * (size_t) copies);
    for (int64_t s = 0; s < p.batch; ++s) {
        for (int64_t j = 0; j < p.ctx; ++j) {
            const size_t off = (size_t) ((s * p.ctx + j) * row);
            row_to_f32(k0.type, k0.row(s, j), kf.data() + off, row);
            row_to_f32(v0.type, v0.row(s, j), vf.data() + off, row);
        }
    }
    for (int i = 1; i < copies; ++i) {
        std::copy_n(kf.begin(), n_one, kf.begin() + (ptrdiff_t) (n_one * (size_t) i));
        std::copy_n(vf.begin(), n_one, vf.begin() + (ptrdiff_t) (n_one * (size_t) i));
    }
    // A rotated cache stores H.k: rotating Q by H_k and the output by H_v gives the unrotated attention (as build_attn).
    std::vector<float> qr = q;
    if (fd.rot.k()) fwht_blocks(qr.data(), (int64_t) qr.size(), fd.rot.n_k);
    if (q_dot == ggml_type::q8_0) {  // the kernel's Q (attn_backend::fa_q_dot_type): compare like with like
        std::vector<block_q8_0> blocks((size_t) (c.head_dim / QK8_0));
        for (size_t r = 0; r < qr.size(); r += (size_t) c.head_dim) {
            round_row_q8_0(qr.data() + r, blocks.data(), c.head_dim);
        }
    }
    eigen_attn_shape es{c.head_dim, c.n_head, c.n_head_kv, p.ctx, p.batch, fd.scale};
    std::vector<float> out(q.size());
    std::vector<std::vector<float>> scratch;
    r.eigen = timed([&](int i) {
        const size_t off = n_one * (size_t) (i % copies);
        eigen_decode_attention(es, qr.data(), kf.data() + off, vf.data() + off, out.data(), pool, scratch);
    });
    if (fd.rot.v()) fwht_blocks(out.data(), (int64_t) out.size(), fd.rot.n_v);
    r.err_vs_eigen = max_abs_diff(out, kernel_out);
}

void time_reference(const sweep_config & c, const sweep_point & p, const fa_desc & fd, fa_args a, ggml_type q_dot,
                    const std::vector<float> & kernel_out, const std::atomic<bool> * stop, point_result & r) {
    if (p.ctx * p.batch > c.ref_max_cells) return;
    if (std::max(fd.rot.n_k, fd.rot.n_v) > 2048) {  // the reference multiplies by the dense Hadamard matrix
        r.note += fmt::format("{}naive reference skipped: dense Hadamard of order {} ({} MiB)", r.note.empty() ? "" : "; ",
                              std::max(fd.rot.n_k, fd.rot.n_v),
                              (int64_t) std::max(fd.rot.n_k, fd.rot.n_v) * std::max(fd.rot.n_k, fd.rot.n_v) * 8 >> 20);
        return;
    }
    std::vector<float> out(kernel_out.size());
    a.out = out.data();
    // slow (double, one thread): no warm-up, at most 3 calls
    r.ref = point_timer{{0, std::min(c.repeats, 3), stop}, {}}([&](int) { ref_flash_attn(fd, a, q_dot); });
    r.err_vs_ref = max_abs_diff(out, kernel_out);
}

// The first call's output of stream 0 (out0's first n_head rows) vs the naive reference on stream 0 alone (one
// thread in double: every stream would cost more than the point's timing). h: host K/V, mask and Q of all streams.
double check_first_call(const fa_desc & fd, const fa_args & h, ggml_type q_dot, const std::vector<float> & out0) {
    fa_desc d1 = fd;
    d1.n_stream = 1;
    fa_args a1 = h;
    a1.k.n_stream = a1.v.n_stream = 1;  // stream 0 is the first in memory: the same pointers
    std::vector<float> ref((size_t) (fd.n_head * fd.n_tps * fd.head_dim_v));
    a1.out = ref.data();
    ref_flash_attn(d1, a1, q_dot);
    return max_abs_diff(ref, std::vector<float>(out0.begin(), out0.begin() + (ptrdiff_t) ref.size()));
}

// Marks r failed (and drops its flash-attention time) when err is beyond the tolerance or NaN.
void fail_if_wrong(point_result & r, const char * against, double err) {
    if (err == -1 || within_tolerance(err, r.point.type, r.point.type)) return;
    r.status = point_status::failed;
    r.fa = {};
    r.note = fmt::format("max |kernel - {}| = {} > tolerance {:g}{}{}", against, std::isnan(err) ? "NaN" : fmt::format("{:.3g}", err),
                         fa_tolerance(r.point.type, r.point.type), r.note.empty() ? "" : "; ", r.note);
}

void time_kshift(attn_backend & be, const sweep_config & c, const sweep_point & p, const kv_tensor & k_all,
                 const attn_rot & rot, int copies, const point_timer & timed, point_result & r) {
    kshift_desc kd;
    kd.rope.n_rot = (int) c.head_dim;
    kd.rope.mode = c.rope_neox ? rope_mode::neox : rope_mode::norm;
    kd.rope.freq_base = c.rope_freq_base;
    kd.rot = rot;
    kd.on_null_rot = null_rot_policy::plain;
    const std::vector<int32_t> shift((size_t) (p.ctx * p.batch), -1);
    const std::shared_ptr<void> dshift = backend_copy(be, shift.data(), shift.size() * sizeof(int32_t));
    bool hazard = false;
    r.kshift = timed([&](int i) {
        hazard = be.k_shift(kd, copy_view(k_all, p.batch, i % copies), static_cast<const int32_t *>(dshift.get()))
                     .null_rotation_hazard || hazard;
    });
    if (hazard) {
        r.note += fmt::format("{}K-shift: quantized K without rotation (upstream crash), timed on the plain path",
                              r.note.empty() ? "" : "; ");
    }
}

}  // namespace

run_limit measure_run_limit(const sweep_config & c, const std::string & host) {
    const bandwidth_result b = measure_bandwidth(c.limit_bytes, c.threads, 5);
    double one = 0;  // the read probe on one thread, best of 5 passes after a warm-up, as measure_bandwidth's
    if (c.threads > 1) {
        read_probe probe(c.limit_bytes, 1);
        one = summarize(sample_loop({1, 5, nullptr}, [&](int) { return probe.read_gbs(); })).max;
    }
    return {c.shard.index, host, b.read_gbs, b.copy_gbs, one};
}

namespace {

// The point's identity and analytical byte counts, nothing measured yet.
point_result point_header(const sweep_config & c, const sweep_point & p, double read_gbs) {
    point_result r;
    r.point = p;
    r.limit_read_gbs = read_gbs;
    r.kv_bytes = fa_kv_bytes(p.ctx, p.batch, c.n_head_kv, p.type, c.head_dim, p.type, c.head_dim);
    r.mask_bytes = kq_mask_bytes(p.ctx, 1, p.batch, ggml_type::f16);
    r.kshift_bytes = kshift_bytes(p.ctx, p.batch, c.n_head_kv, p.type, c.head_dim);
    return r;
}

// Cell counts of the roof's two calls. One sequence's cells whose K+V take at most half of one core's L2 (1 MiB
// assumed when unknown), in whole tiles of cpu_backend::fa_tile cells (the largest tile, so any type's tiles fit
// whole): {fa_tile, that many} when it is at least two tiles and ctx allows, else {n, n} with n = min(ctx, fit),
// a plain rate that includes the per-call work.
std::pair<int64_t, int64_t> roof_cells(const sweep_config & c, const sweep_point & p) {
    const int64_t T = cpu_backend::fa_tile;
    const size_t l2 = cpu_cache_bytes(2) > 0 ? cpu_cache_bytes(2) : (size_t) 1 << 20;
    const size_t per_cell = fa_kv_bytes(1, 1, c.n_head_kv, p.type, c.head_dim, p.type, c.head_dim);
    const int64_t fit = std::max<int64_t>(T, (int64_t) (l2 / 2 / std::max<size_t>(1, per_cell)) / T * T);
    const int64_t big = std::min(fit, p.ctx / T * T);
    if (big >= 2 * T) return {T, big};
    const int64_t n = std::min(p.ctx, fit);
    return {n, n};
}

// Cores the roof's one-thread rate is multiplied by: the threads, but no more than the machine has.
int roof_cores(int threads) {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? std::min(threads, (int) hw) : threads;
}

// Compute roof of the point's kernel: one thread (its own backend, so no wake-ups or split-KV merge of the
// c.threads pool) runs stream 0 of the point's K/V, unmasked, over its first `big` and its first `small` cells
// (roof_cells), alternately, so K/V sit in that core's L2. gbs() = the bytes of the cells in between over the
// difference of the two median times (the per-call work, Q rotation and rounding, output and merge, cancels out),
// times roof_cores(c.threads): cores do not share L2 or execution units on current x86 servers, so this bounds
// what they can do on a long context when memory costs nothing. small == big: that call's plain rate.
class roof_meter {
public:
    roof_meter(const sweep_config & c, const sweep_point & p, fa_desc fd, const fa_args & a)
        : one_(make_cpu_backend(1)), a_(a), cores_(roof_cores(c.threads)) {
        fd.n_stream = 1;
        const auto [small, big] = roof_cells(c, p);
        for (int i = 0; i < 2; ++i) {
            fd_[i] = fd;
            fd_[i].n_kv = i == 0 ? small : big;
            plan_[i] = one_->plan_flash_attn(fd_[i]);
            bytes_[i] = fa_kv_bytes(fd_[i].n_kv, 1, c.n_head_kv, p.type, c.head_dim, p.type, c.head_dim);
        }
        out_.resize((size_t) (fd.head_dim_v * fd.n_head));
        a_.k.n_stream = a_.v.n_stream = 1;
        a_.mask = nullptr;
        a_.out = out_.data();
    }
    int64_t cells() const { return fd_[1].n_kv; }
    // 0 when noise made the difference non-positive three times in a row (the caller drops the sample)
    double gbs() {
        const int calls = 5;  // ~0.1 ms a call
        for (int attempt = 0; attempt < 3; ++attempt) {
            double t[2];
            for (int i = 1; i >= 0; --i) {
                t[i] = median(time_loop({1, calls, nullptr}, [&](int) { one_->flash_attn(fd_[i], plan_[i], a_); }));
            }
            if (fd_[1].n_kv == fd_[0].n_kv) return (double) bytes_[1] / t[1] * cores_;
            if (t[1] > t[0]) return (double) (bytes_[1] - bytes_[0]) / (t[1] - t[0]) * cores_;
        }
        return 0.0;
    }

private:
    std::unique_ptr<attn_backend> one_;
    fa_desc fd_[2];
    fa_plan plan_[2];
    size_t bytes_[2] = {0, 0};
    fa_args a_;
    std::vector<float> out_;
    int cores_ = 1;
};

}  // namespace

point_result run_sweep_point(attn_backend & be, thread_pool & pool, const sweep_config & c, const sweep_point & p,
                             double read_gbs, const call_clock & clock, const std::atomic<bool> * stop) {
    point_result r = point_header(c, p, read_gbs);
    const point_timer timed{{1, c.repeats, stop}, clock};
    const point_timer host_timed{{1, c.repeats, stop}, {}};  // the baselines run on the host
    const size_t one = point_kv_bytes(c, p);
    if (one > c.max_buffer_bytes) {
        r.status = point_status::skipped;
        r.note = fmt::format("K+V {} MiB > --max-buffer-mib {}", one >> 20, c.max_buffer_bytes >> 20);
        return r;
    }
    r.copies = copies_for(one, c.rotate_bytes);
    kv_tensor k_all{nullptr, p.type, c.head_dim, c.n_head_kv, p.ctx, p.batch * r.copies};
    kv_tensor v_all = k_all;
    host_buffer kb(k_all.total_bytes()), vb(v_all.total_bytes());
    k_all.data = kb.data();
    v_all.data = vb.data();
    const attn_rot rot = attn_rot_config(p.type, p.type, c.head_dim, c.head_dim, false);
    fill_cache(k_all, p.batch, r.copies, kv_which::k, rot.n_k, pool);
    fill_cache(v_all, p.batch, r.copies, kv_which::v, rot.n_v, pool);

    std::vector<float> q((size_t) (c.head_dim * c.n_head * p.batch));
    for (int64_t s = 0; s < p.batch; ++s) {
        for (int64_t h = 0; h < c.n_head; ++h) {
            for (int64_t d = 0; d < c.head_dim; ++d) {
                q[(size_t) ((s * c.n_head + h) * c.head_dim + d)] =
                    kv_value(1, kv_which::k, (llama_seq_id) s, (llama_pos) p.ctx - 1, h, d);
            }
        }
    }
    const std::shared_ptr<void> mask = time_masks(be, p, timed, r);

    // kernels read backend memory; the baselines below read the host copies
    const std::shared_ptr<void> kd = backend_copy(be, kb.data(), k_all.total_bytes());
    const std::shared_ptr<void> vd = backend_copy(be, vb.data(), v_all.total_bytes());
    const std::shared_ptr<void> qd = backend_copy(be, q.data(), q.size() * sizeof(float));
    kv_tensor k_dev = k_all, v_dev = v_all;
    k_dev.data = kd.get();
    v_dev.data = vd.get();

    fa_desc fd;
    fd.head_dim_k = fd.head_dim_v = c.head_dim;
    fd.n_head = c.n_head;
    fd.n_head_kv = c.n_head_kv;
    fd.n_kv = p.ctx;
    fd.n_stream = p.batch;
    fd.scale = 1.0f / std::sqrt((float) c.head_dim);
    fd.rot = rot;
    const fa_plan plan = be.plan_flash_attn(fd);
    const size_t out_bytes = q.size() * sizeof(float);
    const std::shared_ptr<void> outd = be.alloc(out_bytes);
    std::vector<float> out0(q.size());
    fa_args a{static_cast<const float *>(qd.get()), copy_view(k_dev, p.batch, 0), copy_view(v_dev, p.batch, 0), 0,
              mask.get(), ggml_type::f16, static_cast<float *>(outd.get())};
    be.flash_attn(fd, plan, a);
    fetch(be, out0.data(), outd.get(), out_bytes);
    // host copies for the check and the baselines: copy 0 of the host K/V and a host mask
    std::vector<uint16_t> mask_host((size_t) (p.ctx * p.batch));
    fetch(be, mask_host.data(), mask.get(), mask_host.size() * sizeof(uint16_t));
    fa_args h{q.data(), copy_view(k_all, p.batch, 0), copy_view(v_all, p.batch, 0), 0, mask_host.data(), ggml_type::f16,
              nullptr};
    r.err_check = check_first_call(fd, h, be.fa_q_dot_type(p.type), out0);
    fail_if_wrong(r, "reference", r.err_check);
    if (r.status == point_status::failed) return r;  // no timing of a wrong kernel
    const auto fa_call = [&](int i) {
        a.k = copy_view(k_dev, p.batch, i % r.copies);
        a.v = copy_view(v_dev, p.batch, i % r.copies);
        be.flash_attn(fd, plan, a);
    };
    if (clock || !on_host(be)) {
        r.fa = timed(fa_call);
    } else {
        // each timed call is followed by one read pass of the probe and the compute roof: the call's GB/s over the
        // pass's (adj_frac) and the roof's over the pass's (roof_frac) compare them in the same second; freed before
        // the baselines allocate theirs
        read_probe probe(c.limit_bytes, c.threads);
        roof_meter roof(c, p, fd, a);
        std::vector<double> probe_gbs, frac, roof_gbs, roof_frac;
        r.fa = time_stats_of(time_loop(timed.spec, fa_call, {}, [&](int, double ns) {
            probe_gbs.push_back(probe.read_gbs());
            frac.push_back((double) r.kv_bytes / ns / probe_gbs.back());
            if (const double g = roof.gbs(); g > 0) {
                roof_gbs.push_back(g);
                roof_frac.push_back(g / probe_gbs.back());
            }
        }));
        r.adj_read_gbs = median(std::move(probe_gbs));
        r.adj_frac = median(std::move(frac));
        r.roof_gbs = median(std::move(roof_gbs));
        r.roof_frac = median(std::move(roof_frac));
        r.roof_ctx = roof.cells();
    }

    time_eigen(c, p, fd, h.k, h.v, q, be.fa_q_dot_type(p.type), out0, pool, host_timed, r);
    time_reference(c, p, fd, h, be.fa_q_dot_type(p.type), out0, stop, r);
    fail_if_wrong(r, "Eigen", r.err_vs_eigen);
    fail_if_wrong(r, "reference", r.err_vs_ref);
    time_kshift(be, c, p, k_dev, rot, r.copies, timed, r);  // last: it rewrites K
    return r;
}

sweep_output run_sweep(attn_backend & be, const sweep_config & c, const machine_info & m, const sweep_hooks & hooks) {
    c.validate();
    sweep_output o;
    o.config = c;
    o.machine = m;
    try {
        o.limits.push_back(hooks.measure_limit ? hooks.measure_limit(c, m.host) : measure_run_limit(c, m.host));
    } catch (const std::bad_alloc &) {
        throw option_error({"limit_bytes"}, fmt::format("limit_bytes {} MiB: out of memory allocating the bandwidth probe's 2 x {} MiB",
                                                        c.limit_bytes >> 20, c.limit_bytes >> 20));
    }
    o.notes = {
        "layout: n_stream = batch, one sequence per stream (llama.cpp without -kvu), ctx cells each, decoded token at "
        "pos ctx-1 (every cell attended)",
        fmt::format("K/V rotated among copies so >= {} MiB (2x the last-level cache, at least 64 MiB) cycle between "
                    "calls: no point is timed from cache; column 'copies'{}",
                    c.rotate_bytes >> 20, hooks.clock ? "; device L2 flushed before every timed call" : ""),
        "quantized K/V are Hadamard-rotated as llama_kv_cache does by default (attn_rot_config)",
        hooks.clock ? "times: CUDA events, one warm-up call, then --repeats calls; GB/s and %lim from the median time, "
                      "limit = device-to-device copy bandwidth (read + written bytes per second) measured in this run"
                    : "times: one warm-up call, then --repeats calls; GB/s and %lim from the median time, limit = read "
                      "bandwidth measured in this run with the same thread count; %adj = median over the timed calls "
                      "of the call's GB/s over one read pass of the same probe right after it (same second, same "
                      "neighbours); %roof = the kernel's compute roof (one thread, K/V in its L2, per-call work "
                      "excluded, times the threads up to the cores: its speed if memory cost nothing) over that same pass, below 100 "
                      "compute-bound (%adj cannot reach 100), above 100 memory-bound",
        fmt::format("Eigen baseline: dense GEMM Q.K^T, softmax, .V on pre-converted f32 K/V, {} threads, skipped above "
                    "{} MiB of f32 K+V",
                    c.threads, c.eigen_max_bytes >> 20),
        fmt::format("naive reference (double, 1 thread, <= 3 runs) only up to ctx*batch <= {} cells", c.ref_max_cells),
        "mask/update/K-shift: mask metadata is not rotated (it fits in cache); K-shift rotates every cell of the copy",
    };
    if (const size_t llc = last_level_cache_bytes(); llc > 0 && c.limit_bytes <= llc) {
        o.notes.push_back(fmt::format("the probe's {} MiB buffer fits in the {} MiB last-level cache: the limit (and "
                                      "%lim, %adj) may measure the cache, not memory; raise --limit-mib",
                                      c.limit_bytes >> 20, llc >> 20));
    }
    const std::vector<sweep_point> pts = shard_points(plan_points(c), c.shard);
    thread_pool pool(c.threads);
    for (size_t i = 0; i < pts.size(); ++i) {
        if (hooks.stop && hooks.stop->load()) {
            o.interrupted = true;
            break;
        }
        try {
            KVSIM_NVTX_RANGE("step", (int64_t) i + 1);   // one sweep point (docs/profiling.md)
            o.results.push_back(run_sweep_point(be, pool, c, pts[i], o.limits.front().read_gbs, hooks.clock, hooks.stop));
        } catch (const loop_interrupted &) {
            o.interrupted = true;   // the unfinished point is dropped; the measured ones are kept
            break;
        } catch (const std::bad_alloc &) {
            point_result r = point_header(c, pts[i], o.limits.front().read_gbs);
            r.status = point_status::skipped;
            r.note = fmt::format("out of memory in this point (K+V {} MiB x {} copies, and its baselines; lower "
                                 "--max-buffer-mib, --eigen-max-mib or --ref-max-cells)",
                                 point_kv_bytes(c, pts[i]) >> 20, copies_for(point_kv_bytes(c, pts[i]), c.rotate_bytes));
            o.results.push_back(std::move(r));
        }
        if (hooks.progress) hooks.progress(i + 1, pts.size());
    }
    return o;
}

}  // namespace kvsim
