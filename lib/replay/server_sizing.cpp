#include "replay/server_sizing.h"

#include "core/errors.h"
#include "kv/fit.h"
#include "replay/run_replay.h"

#include <cstdint>
#include <fmt/format.h>
#include <limits>

namespace kvsim {

namespace {
constexpr double k_gib = 1024.0 * 1024.0 * 1024.0;
constexpr uint64_t k_max_n_ctx = uint64_t(1) << 30;   // compute_context_sizes' bound

// Bytes the fit may use: --device-memory, else the profile's; -1 when neither says.
int64_t device_bytes(const replay_options & opt) {
    if (opt.device_memory >= 0) return opt.device_memory;
    return opt.device.memory_mib > 0 ? (int64_t) (opt.device.memory_mib << 20) : -1;
}

int64_t device_use(const replay_options & opt, uint32_t n_ctx) {
    context_params p = opt.ctx;
    p.n_ctx = n_ctx;
    return (int64_t) replay_memory(opt, p, compute_context_sizes(opt.model, p), true).device();
}

std::string memory_warning_text(int64_t used, int64_t free) {
    return fmt::format("weights + K/V + compute need {:.2f} GiB of the device's {:.2f} GiB: the real llama-server would "
                       "fail to allocate them (or --fit would move layers off the device, which kvsim does not model)",
                       (double) used / k_gib, (double) free / k_gib);
}

// For a context the fit does not choose (-c given, --kv-unified-per-slot): "" when it fits the device's memory (or that
// is unknown), else what it needs against what there is, as the fit would have said.
std::string fit_note(replay_options & opt) {
    const int64_t free = device_bytes(opt), used = device_use(opt, opt.ctx.n_ctx);
    if (free < 0 || free - used >= opt.fit.margin) return "";
    opt.memory_warning = memory_warning_text(used, free);
    return fmt::format(" (needs {:.2f} GiB, more than the device's {:.2f} GiB less the {:.0f} MiB --fit-target margin: "
                       "replayed as asked)", (double) used / k_gib, (double) free / k_gib, (double) opt.fit.margin / (1 << 20));
}

std::string fit_line(const replay_options & opt, uint32_t n_ctx_train, uint32_t slots, const fit_result & r, int64_t free) {
    const std::string asked = fmt::format("n_ctx_train {} x {} slot(s) = {}", n_ctx_train, slots, (uint64_t) n_ctx_train * slots);
    const std::string dev = opt.device_memory >= 0 ? fmt::format("--device-memory {:.2f} GiB", (double) free / k_gib)
                                                   : fmt::format("{}'s {:.2f} GiB", opt.device.name, (double) free / k_gib);
    const std::string margin = fmt::format("the {:.0f} MiB --fit-target margin", (double) opt.fit.margin / (1 << 20));
    if (free < 0) return fmt::format("{} (--fit: the device's memory is unknown, not checked; give --device-memory)", asked);
    if (r.reduced) {
        return fmt::format("{} does not leave {} of {}: --fit shrank it to {}{}", asked, margin, dev, r.n_ctx,
                           r.fits ? "" : " (the smallest it may choose, and even that does not fit)");
    }
    if (!r.fits) return fmt::format("{}, which does not leave {} of {} (replayed as asked)", asked, margin, dev);
    return fmt::format("{} (--fit: fits {} with {})", asked, dev, margin);
}

// server.cpp: -np auto is 4 slots in a unified cache (-no-kvu then refused).
void resolve_parallel_auto(replay_options & opt) {
    if (!opt.n_parallel_auto) return;
    opt.n_parallel_auto = false;
    if (opt.no_kv_unified_given) {
        throw usage_error("-no-kvu: with -np auto llama-server always runs 4 slots in a unified cache; give -np N to choose");
    }
    opt.ctx.n_seq_max = 4;
    opt.ctx.kv_unified = true;
}

// server.cpp: --kv-unified-per-slot N with -c absent sizes the pool slots x N.
std::string size_per_slot(replay_options & opt) {
    const uint64_t n = (uint64_t) opt.ctx.n_seq_max * (uint64_t) opt.server.kv_unified_per_slot;
    if (n > k_max_n_ctx) {
        throw option_error({"kv_unified_per_slot", "n_seq_max"},
                           fmt::format("kv_unified_per_slot {} x {} slots = {} cells exceeds {} (the largest context)",
                                       opt.server.kv_unified_per_slot, opt.ctx.n_seq_max, n, k_max_n_ctx));
    }
    opt.ctx.n_ctx = (uint32_t) n;
    return fmt::format("--kv-unified-per-slot {} x {} slot(s) = {}", opt.server.kv_unified_per_slot, opt.ctx.n_seq_max, n) +
           fit_note(opt);
}

// common/fit.cpp: common_params_fit_impl with n_ctx 0, on the device's memory (unknown: nothing shrinks). It reads
// n_ctx_train after its probe context, so custom YaRN scaling has raised it (n_ctx_train_after_init).
std::string size_by_fit(replay_options & opt, bool ctx_zero) {
    const uint32_t slots = opt.ctx.n_seq_max, n_ctx_train = n_ctx_train_after_init(opt.model, opt.ctx.rope);
    if (n_ctx_train != opt.model.n_ctx_train && (uint64_t) n_ctx_train * slots > max_n_ctx_train) {
        // only custom YaRN scaling raises n_ctx_train this far: say so rather than -c's range
        throw option_error({"rope_scale", "yarn_orig_ctx", "n_seq_max"},
                           fmt::format("the training context {} (raised by rope_scale / yarn_orig_ctx) x {} slots (n_seq_max) is "
                                       "{} cells, more than 2^30: lower them or give -c", n_ctx_train, slots,
                                       (uint64_t) n_ctx_train * slots));
    }
    const int64_t free = device_bytes(opt);
    const auto used_at = [&](uint32_t n) { return device_use(opt, n); };
    const int64_t unlimited = std::numeric_limits<int64_t>::max() / 4;
    const fit_result r = fit_context(0, n_ctx_train, slots, opt.ctx.kv_unified, free < 0 ? unlimited : free, opt.fit, used_at);
    opt.ctx.n_ctx = r.n_ctx;
    if (free >= 0 && !r.fits) opt.memory_warning = memory_warning_text(device_use(opt, r.n_ctx), free);
    return (ctx_zero ? "-c 0 (or -fitc 4294967295): " : "-c absent: ") + fit_line(opt, n_ctx_train, slots, r, free);
}
}  // namespace

std::string size_server_context(replay_options & opt) {
    resolve_parallel_auto(opt);
    // the slots first: a count out of range would size a context from it (compute_context_sizes' message)
    context_params probe = opt.ctx;
    probe.n_ctx = 1;
    (void) compute_context_sizes(opt.model, probe);
    const bool ctx_zero = opt.fit.n_ctx_min == std::numeric_limits<uint32_t>::max();   // -c 0 (common/arg.cpp)
    if (opt.ctx.n_ctx == 0 && opt.server.kv_unified_per_slot > 0 && !ctx_zero) return size_per_slot(opt);
    if (opt.ctx.n_ctx != 0) return "-c as given" + fit_note(opt);
    if (opt.fit.enabled) return size_by_fit(opt, ctx_zero);
    opt.ctx.n_ctx = opt.model.n_ctx_train;
    return fmt::format("n_ctx_train {} for all {} slot(s) together (-c {}, --fit off: llama_context's default)",
                       opt.ctx.n_ctx, opt.ctx.n_seq_max, ctx_zero ? "0" : "absent") + fit_note(opt);
}

}  // namespace kvsim
