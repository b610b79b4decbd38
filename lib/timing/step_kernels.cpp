#include "timing/step_kernels.h"

#include "util/nvtx.h"

#include <cmath>

namespace kvsim {

namespace {

// Consecutive ubatch stream blocks [first, first + count) that live in cache streams [stream0, stream0 + count).
struct stream_run {
    int64_t first = 0, stream0 = 0, count = 0;
};

// One flash-attention call per run (fa_args reads K/V of streams stream0 + s). Upstream's sequential split keeps a
// ubatch's streams consecutive (llama_kv_cache::get_k views streams s0..s1), so this is one run in practice; K/V
// must still be read from the stream the mask and --verify use, sinfo.strm[s], whatever the ubatch.
std::vector<stream_run> stream_runs(const slot_info & sinfo) {
    std::vector<stream_run> runs;
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        if (!runs.empty() && sinfo.strm[s] == runs.back().stream0 + runs.back().count) {
            ++runs.back().count;
        } else {
            runs.push_back({(int64_t) s, (int64_t) sinfo.strm[s], 1});
        }
    }
    return runs;
}

fa_desc run_desc(const fa_desc & d, const stream_run & r) {
    fa_desc dr = d;
    dr.n_stream = r.count;
    return dr;
}

}  // namespace

rope_params context_rope(const model_shape & m, const rope_scaling & s) {
    const rope_cparams c = resolve_rope(m, s);
    rope_params p;
    p.n_rot = (int) m.head_dim;
    p.mode = m.rope == rope_type::neox ? rope_mode::neox : rope_mode::norm;
    p.freq_base = c.freq_base;
    p.freq_scale = c.freq_scale;
    p.n_ctx_orig = (int) c.n_ctx_orig_yarn;
    p.ext_factor = c.ext_factor;
    p.attn_factor = c.attn_factor;
    p.beta_fast = c.beta_fast;
    p.beta_slow = c.beta_slow;
    return p;
}

step_kernels::step_kernels(attn_backend & be, kernel_drive drive, const model_shape & m, const rope_scaling & rs,
                           const attn_rot & rot)
    : be_(be), drive_(std::move(drive)), m_(m), rot_(rot), rope_(context_rope(m, rs)) {}

// Nanoseconds of `calls` by the drive's clock (steady_clock around synchronous calls when it has none).
double step_kernels::timed(const std::function<void()> & calls) const {
    return drive_.time_ns ? drive_.time_ns(calls) : host_clock_ns(calls);
}

kshift_times step_kernels::k_shift(const cache_buffers & b, const std::vector<int32_t> & shift) {
    kshift_desc d;
    d.rope = rope_;
    d.rot = rot_;
    d.on_null_rot = null_rot_policy::plain;
    KVSIM_NVTX_RANGE("k_shift", (int64_t) shift.size());
    if (shift.size() > dev_shift_ints_) {
        dev_shift_ = be_.alloc(shift.size() * sizeof(int32_t));
        dev_shift_ints_ = shift.size();
    }
    be_.upload(dev_shift_.get(), shift.data(), shift.size() * sizeof(int32_t));
    kshift_times t;
    t.ns = timed([&] {
        for (const auto & k : b.k) {
            const kshift_report r = be_.k_shift(d, k, (const int32_t *) dev_shift_.get());
            t.hazards += r.null_rotation_hazard ? 1 : 0;
        }
    });
    return t;
}

fa_desc step_kernels::desc(const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const {
    fa_desc d;
    d.head_dim_k = d.head_dim_v = m_.head_dim;
    d.n_head = m_.n_head;
    d.n_head_kv = m_.n_head_kv;
    d.n_kv = n_kv;
    d.n_stream = sinfo.n_stream();
    d.n_tps = ub.n_tokens / d.n_stream;
    d.scale = 1.0f / std::sqrt((float) m_.head_dim);
    d.softcap = m_.attn_softcap;
    d.rot = rot_;
    return d;
}

// Build (or, with drive.incremental_mask and the same shape and streams as the last step, update) the step's mask
// in b.mask; returns the kernel time in ns.
double step_kernels::build_mask(cache_buffers & b, const kq_mask_desc & md, const slot_info & sinfo,
                                const kq_mask_stream * streams, bool & updated) {
    KVSIM_NVTX_RANGE("kq_mask", md.n_kv);
    const size_t mask_bytes = (size_t) md.n_kv * md.n_tps * md.n_stream * sizeof(uint16_t);
    if (mask_bytes > b.mask_bytes) {
        b.mask = be_.alloc(mask_bytes);
        b.mask_bytes = mask_bytes;
        b.mask_state.forget();
    }
    double ns = 0;
    updated = drive_.incremental_mask && b.mask_state.plan(md, sinfo.strm, streams);
    if (updated) {
        ns = timed([&] { be_.update_kq_mask(md, streams, b.mask_state.changes(), b.mask.get()); });
    } else {
        ns = timed([&] { be_.build_kq_mask(md, streams, b.mask.get()); });
    }
    if (drive_.incremental_mask) b.mask_state.remember(md, sinfo.strm, streams);
    return ns;
}

void step_kernels::ensure_q_out(size_t q_floats, size_t out_floats) {
    if (q_floats > dev_q_floats_) {
        q_.resize(q_floats);
        for (size_t i = 0; i < q_.size(); ++i) q_[i] = std::sin(0.37f * (float) (i + 1));
        dev_q_ = be_.alloc(q_floats * sizeof(float));
        be_.upload(dev_q_.get(), q_.data(), q_floats * sizeof(float));
        dev_q_floats_ = q_floats;
    }
    if (out_floats > dev_out_floats_) {
        dev_out_ = be_.alloc(out_floats * sizeof(float));
        dev_out_floats_ = out_floats;
    }
}

step_times step_kernels::run(cache_buffers & b, const fa_desc & d, const slot_info & sinfo, const ubatch & ub) {
    const kv_cache & c = *b.cache;
    const uint32_t n_kv = (uint32_t) d.n_kv;
    kq_mask_desc md;
    md.n_kv = n_kv;
    md.n_tps = d.n_tps;
    md.n_stream = d.n_stream;
    md.n_swa = c.params().n_swa;
    md.swa = c.params().swa;
    md.type = ggml_type::f16;
    std::vector<llama_seq_id> tok_seq(ub.n_tokens);
    for (uint32_t i = 0; i < ub.n_tokens; ++i) tok_seq[i] = ub.seq_id[i][0];
    std::vector<kq_mask_stream> streams(d.n_stream);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        const kv_cells & cells = c.cells(sinfo.strm[s]);
        streams[s] = {cells.pos().data(), cells.seq().data(), ub.pos.data() + s * d.n_tps, tok_seq.data() + s * d.n_tps};
    }
    step_times t;
    t.mask_ns = build_mask(b, md, sinfo, streams.data(), t.mask_updated);

    const size_t q_floats = (size_t) d.head_dim_k * d.n_head * d.n_tps * d.n_stream;
    const size_t out_floats = (size_t) d.head_dim_v * d.n_head * d.n_tps * d.n_stream;
    ensure_q_out(q_floats, out_floats);
    const std::vector<stream_run> runs = stream_runs(sinfo);
    std::vector<fa_plan> plans;
    for (const stream_run & sr : runs) plans.push_back(be_.plan_flash_attn(run_desc(d, sr)));
    {
        KVSIM_NVTX_RANGE("attention", n_kv);
        // Last layer first: every layer writes the same output buffer, and --verify checks it against layer 0's
        // content (verify.h), so layer 0 must run last (with --time-layers > 1 the other order reported layer 1's
        // output as a mismatch).
        for (size_t l = b.k.size(); l-- > 0;) {
            t.attn_ns += timed([&] {
                for (size_t r = 0; r < runs.size(); ++r) {
                    const stream_run & sr = runs[r];
                    const int64_t q_off = sr.first * d.n_tps * d.n_head * d.head_dim_k;
                    const int64_t o_off = sr.first * d.n_tps * d.n_head * d.head_dim_v;
                    const auto * mask = static_cast<const uint16_t *>(b.mask.get()) + sr.first * d.n_tps * n_kv;
                    fa_args a{static_cast<const float *>(dev_q_.get()) + q_off, b.k[l], b.v[l], sr.stream0, mask,
                              ggml_type::f16, static_cast<float *>(dev_out_.get()) + o_off};
                    be_.flash_attn(run_desc(d, sr), plans[r], a);
                }
            });
        }
    }
    t.attn_ns /= (double) b.k.size();
    return t;
}

const std::vector<float> & step_kernels::download_out(const fa_desc & d) {
    const size_t out_floats = (size_t) d.head_dim_v * d.n_head * d.n_tps * d.n_stream;
    out_.resize(out_floats);
    be_.download(out_.data(), dev_out_.get(), out_floats * sizeof(float));
    return out_;
}

}  // namespace kvsim
