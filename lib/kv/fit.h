// llama-server's --fit for the context size: with -c absent it asks for n_ctx_train x n_seq_max
// cells and shrinks the context until the projected device memory (weights + K/V + compute)
// leaves the margin free. Source: common/fit.cpp: common_params_fit_impl, steps 1 and 2 (the
// context only; its step 3, moving layers off the device, is not modelled: a model that does
// not fit with the smallest context does not fit here). Defaults: common/common.h
// (fit_params = true, fit_params_min_ctx = 4096, fit_params_target = 1024 MiB per device).
#pragma once

#include <cstdint>
#include <functional>

namespace kvsim {

struct fit_params {
    bool enabled = true;                    // --fit on|off
    uint32_t n_ctx_min = 4096;              // -fitc: the smallest context per stream the fit may choose
    int64_t margin = int64_t(1024) << 20;   // -fitt: bytes the fit leaves free on the device
    // Throws usage_error naming the field for n_ctx_min == 0 or a negative margin.
    void validate() const;
};

struct fit_result {
    uint32_t n_ctx = 0;   // the context llama_context is created with (as requested when the fit changes nothing)
    bool fits = false;    // projected use at n_ctx leaves the margin free
    bool reduced = false; // the fit shrank the context
};

// common_params_fit_impl's arithmetic for one device with `free_bytes` free: `n_ctx` is the
// requested context (0 = -c absent), `used_at(n)` the projected device bytes at context n
// (memory_breakdown::device()). With -c absent the largest context is n_ctx_train * n_seq_max
// and the smallest n_ctx_min per stream; when the largest does not leave the margin, the
// context is interpolated linearly between them (in int64 arithmetic, as upstream) and rounded
// down to a multiple of 256 per stream, not below the smallest. A context the user gave is never
// changed. With the fit off: the requested context, n_ctx_train when 0 (llama_context's own
// default, for all sequences together); `fits` as the projection says.
fit_result fit_context(uint32_t n_ctx, uint32_t n_ctx_train, uint32_t n_seq_max, bool kv_unified, int64_t free_bytes,
                       const fit_params & p, const std::function<int64_t(uint32_t n_ctx)> & used_at);

}  // namespace kvsim
