#include "kv/fit.h"

#include "core/errors.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

void fit_params::validate() const {
    if (n_ctx_min == 0) throw usage_error("fit n_ctx_min must be > 0 (the smallest context per stream the fit may choose)");
    if (margin < 0) throw usage_error(fmt::format("fit margin must be >= 0 bytes, got {}", margin));
}

fit_result fit_context(uint32_t n_ctx, uint32_t n_ctx_train, uint32_t n_seq_max, bool kv_unified, int64_t free_bytes,
                       const fit_params & p, const std::function<int64_t(uint32_t)> & used_at) {
    p.validate();
    n_seq_max = std::max<uint32_t>(1, n_seq_max);
    const uint32_t n_streams = kv_unified ? 1 : n_seq_max;
    if (!p.enabled) {
        const uint32_t n = n_ctx ? n_ctx : n_ctx_train;   // llama_context: n_ctx 0 = n_ctx_train
        return {n, free_bytes - used_at(n) >= p.margin, false};
    }
    // saturating, as upstream (UINT32_MAX stays a sentinel)
    const uint32_t n_ctx_max = (uint32_t) std::min<uint64_t>(uint64_t(n_ctx_train) * n_seq_max, UINT32_MAX);
    const uint32_t n_ctx_min_total = (uint32_t) std::min<uint64_t>(uint64_t(p.n_ctx_min) * n_streams, UINT32_MAX);
    const bool n_ctx_auto = n_ctx == 0;
    if (n_ctx_auto) n_ctx = n_ctx_max;

    // step 1: nothing to change when the requested context leaves the margin
    const int64_t used = used_at(n_ctx);
    if (free_bytes - used >= p.margin) return {n_ctx, true, false};
    // step 2: a context the user gave, or one no larger than the minimum, is kept
    if (!n_ctx_auto || n_ctx_max <= n_ctx_min_total) return {n_ctx, false, false};
    const int64_t used_target = free_bytes - p.margin;
    const int64_t used_min = used_at(n_ctx_min_total);
    if (used_target <= used_min) return {n_ctx_min_total, false, true};
    // linear interpolation between the smallest and the largest context, in upstream's integer arithmetic
    uint32_t n = n_ctx_min_total;
    // the product in 128 bits: upstream's int64 product overflows (undefined) past about 2^31 cells x 4 GiB; where it
    // does not, the result is the same, and the quotient is below n_ctx_max - n_ctx_min_total (used_target < used)
    n += (uint32_t) ((__int128) (n_ctx_max - n_ctx_min_total) * (used_target - used_min) / (used - used_min));
    const uint32_t align = 256 * n_streams;   // "round down context for CUDA backend, keep it divisible by the number of streams"
    n = std::max(n - n % align, n_ctx_min_total);
    return {n, true, true};
}

}  // namespace kvsim
