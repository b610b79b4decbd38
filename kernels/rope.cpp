#include "rope.h"

#include <algorithm>
#include <cmath>

namespace kvsim {

namespace {
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float) M_PI)) / (2 * logf(base));
}

float yarn_ramp(float low, float high, int64_t i0) {
    const float y = (float) (i0 / 2 - low) / std::max(0.001f, high - low);
    return 1 - std::min(1.0f, std::max(0.0f, y));
}
}  // namespace

void rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
    const float start = floorf(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
    const float end = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
    dims[0] = std::max(0.0f, start);
    dims[1] = std::min((float) (n_dims - 1), end);
}

void rope_cache_init(const rope_params & p, int64_t pos, const float corr_dims[2], float * cache) {
    const float theta_scale = powf(p.freq_base, -2.0f / p.n_rot);
    float theta = (float) pos;
    for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
        const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        const float theta_interp = p.freq_scale * theta_extrap;
        float th = theta_interp;
        float mscale = p.attn_factor;
        if (p.ext_factor != 0.0f) {
            const float ramp_mix = yarn_ramp(corr_dims[0], corr_dims[1], i0) * p.ext_factor;
            th = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
        }
        cache[i0 + 0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void rope_rotate(const rope_params & p, const float * cache, float * x) {
    const bool neox = p.mode == rope_mode::neox;
    const int64_t off = neox ? p.n_rot / 2 : 1;
    for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
        const int64_t ic = neox ? i0 / 2 : i0;
        const float c = cache[i0 + 0];
        const float s = cache[i0 + 1];
        const float x0 = x[ic];
        const float x1 = x[ic + off];
        x[ic] = x0 * c - x1 * s;
        x[ic + off] = x0 * s + x1 * c;
    }
}

}  // namespace kvsim
