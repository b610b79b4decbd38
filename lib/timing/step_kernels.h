// The kernel calls of the replay's timed steps, through an attn_backend on the buffers of timing/kv_buffers.h:
// the K-shift of llama_kv_cache::update (build_graph_shift), the KQ mask of set_input_kq_mask, and flash-attention
// (ggml_flash_attn_ext as llama-graph.cpp: build_attn_mha calls it) over a ubatch's streams, each timed by the
// drive's clock. Q is a fixed function of its index (no model runs), the output is kept for --verify.
#pragma once

#include "attention.h"
#include "model/model.h"
#include "model/rope_scaling.h"
#include "timing/kv_buffers.h"
#include "util/timing_loop.h"

#include <functional>
#include <memory>
#include <vector>

namespace kvsim {

// How the hooks drive and time a backend; the defaults are the CPU backend's.
struct kernel_drive {
    // Nanoseconds of one group of backend calls (it runs them). Empty: steady_clock around the calls, which must
    // then be synchronous. The CUDA replay passes CUDA events around calls that only enqueue (cuda_event_timer), so
    // launches, host checks and synchronisations are not counted.
    call_clock time_ns;
    // Between timed steps of the same mask shape and streams, rewrite only the changed cells and rows
    // (attn_backend::update_kq_mask, same bits as a build) instead of building the mask from scratch. llama.cpp
    // builds it every ubatch on the host (set_input_kq_mask), which the CPU replay mirrors.
    bool incremental_mask = false;
};

// A K-shift of one cache's timed layers.
struct kshift_times {
    double ns = 0;          // all timed layers together
    uint64_t hazards = 0;   // layers whose shift met upstream's null-rotation hazard (quantized K, no rotation)
};

// Kernel times of one timed step (one ubatch in one cache).
struct step_times {
    double mask_ns = 0;          // the mask build or update (one mask serves every layer)
    double attn_ns = 0;          // flash attention, mean of the timed layers (one layer's time)
    bool mask_updated = false;   // the mask was updated in place (kernel_drive::incremental_mask), not built
};

// The RoPE of a K-shift: the model's rotation with the context's cparams (model/rope_scaling.h: resolve_rope).
rope_params context_rope(const model_shape & m, const rope_scaling & s);

class step_kernels {
public:
    // `be` must outlive this. m: the model's heads, RoPE and softcap; rs: the context's RoPE flags (context_rope);
    // rot: the cache types' Hadamard rotation.
    step_kernels(attn_backend & be, kernel_drive drive, const model_shape & m, const rope_scaling & rs, const attn_rot & rot);

    const rope_params & rope() const { return rope_; }

    // Rotate every timed layer's K by shift ([kv_size * n_stream], shift_array) with null_rot_policy::plain.
    kshift_times k_shift(const cache_buffers & b, const std::vector<int32_t> & shift);

    // The flash-attention call of a placed ubatch: n_kv cells per stream, n_tps = n_tokens / n_stream query
    // tokens per stream, scale 1/sqrt(head_dim) (llama-graph.cpp: build_attn's kq_scale).
    fa_desc desc(const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const;
    // Build (or update) the step's mask in b.mask from the cells of sinfo's streams, then run flash attention
    // for every timed layer; d from desc().
    step_times run(cache_buffers & b, const fa_desc & d, const slot_info & sinfo, const ubatch & ub);

    // Q of the last run, [head_dim, n_head, n_tps, n_stream] floats (a prefix of a longer buffer).
    const std::vector<float> & q() const { return q_; }
    // The output of the last run copied to the host, [head_dim, n_head, n_tps, n_stream] floats of d: layer 0's
    // (run() runs the timed layers last to first).
    const std::vector<float> & download_out(const fa_desc & d);

private:
    double timed(const std::function<void()> & calls) const;
    double build_mask(cache_buffers & b, const kq_mask_desc & md, const slot_info & sinfo,
                      const kq_mask_stream * streams, bool & updated);
    void ensure_q_out(size_t q_floats, size_t out_floats);

    attn_backend & be_;
    kernel_drive drive_;
    model_shape m_;
    attn_rot rot_;
    rope_params rope_;
    // per-step Q and output in backend memory, grown when a step needs more (Q's values depend only on the index,
    // so its upload happens only when it grows); the host copies serve --verify
    std::vector<float> q_, out_;
    std::shared_ptr<void> dev_q_, dev_out_, dev_shift_;
    size_t dev_q_floats_ = 0, dev_out_floats_ = 0, dev_shift_ints_ = 0;
};

}  // namespace kvsim
