#include "timing/kernel_report.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

namespace {

// Timed ubatches of one kind: decode (one query token per stream, the memory-bound case kvbench measures) or
// several tokens per stream (prompt chunks, sequences decoding together in a unified cache: more arithmetic per
// byte, so their GB/s is not a bandwidth efficiency).
struct attn_class {
    size_t ubatches = 0;
    double ns = 0, bytes = 0;
    double gbs() const { return ns > 0 ? bytes / ns : 0; }
};

std::pair<attn_class, attn_class> split_by_tokens(const std::vector<bandwidth_row> & rows) {
    attn_class one, more;
    for (const auto & r : rows) {
        attn_class & c = r.tokens <= r.n_stream ? one : more;
        ++c.ubatches;
        c.ns += r.attn_ns;
        c.bytes += (double) r.kv_bytes;
    }
    return {one, more};
}

double overall_gbs(const kernel_account & a) {
    return a.attn_ns_total() > 0 ? a.kv_bytes_total() / a.attn_ns_total() : 0;
}

}  // namespace

nlohmann::json kernel_summary(const kernel_report_input & in) {
    const kernel_account & a = *in.acct;
    const double limit = in.limit.read_gbs;
    std::vector<double> fr;
    double mask_ns = 0;
    for (const auto & r : a.rows()) {
        fr.push_back(r.frac_of_limit);
        mask_ns += r.mask_ns;
    }
    std::sort(fr.begin(), fr.end());
    const double gbs = overall_gbs(a);
    const auto [one, more] = split_by_tokens(a.rows());
    const auto class_json = [&](const attn_class & c) {
        return nlohmann::json{{"ubatches", c.ubatches}, {"attention_seconds", c.ns * 1e-9}, {"gbs", c.gbs()},
                              {"frac_of_limit", limit > 0 ? c.gbs() / limit : 0}};
    };
    const nlohmann::json by_tokens = {{"one_per_stream", class_json(one)}, {"several_per_stream", class_json(more)}};
    nlohmann::json j = {
        {"backend", in.backend == backend_kind::cpu ? "cpu" : "cuda"},
        {"threads", in.threads},
        {"measured_limit_gbs", {{"read", limit}, {"copy", in.limit.copy_gbs}}},
        {"layers_timed", in.layers},
        {"layers_scaled_note", "times are per layer; the model's other layers are assumed to cost the same"},
        {"ubatches_seen", in.sampler->seen()},
        {"ubatches_timed", a.rows().size()},
        {"kernel_wall_seconds", a.spent_ns() * 1e-9},
        {"attention_gbs", gbs},
        {"attention_frac_of_limit", limit > 0 ? gbs / limit : 0},
        {"attention_frac_median", fr.empty() ? 0.0 : fr[fr.size() / 2]},
        {"attention_by_tokens", by_tokens},
        {"mask_ns_mean", a.rows().empty() ? 0.0 : mask_ns / (double) a.rows().size()},
        {"mask_updates", a.mask_updates()},   // timed steps whose mask was updated in place (kernel_drive), not built
        {"k_shift_events", a.shift_events()},
        {"k_shift_null_rotation_hazards", a.shift_hazards()},
        {"rotation", {{"k", in.rot.n_k}, {"v", in.rot.n_v}}},
    };
    if (in.verify) j["verify"] = in.verify->json();
    return j;
}

std::vector<std::pair<std::string, std::string>> kernel_terminal_rows(const kernel_report_input & in) {
    const kernel_account & a = *in.acct;
    const bandwidth_result & lim = in.limit;
    const double gbs = overall_gbs(a);
    const auto [one, more] = split_by_tokens(a.rows());
    const auto pct = [&](double g) { return lim.read_gbs > 0 ? 100.0 * g / lim.read_gbs : 0.0; };
    const uint64_t hazards = a.shift_hazards();
    std::vector<std::pair<std::string, std::string>> rows = {
        // these rows sit beside the simulated device's times: say that they are not its
        {"kernels", fmt::format("timed on this machine ({}, {} threads): {}", in.backend == backend_kind::cuda ? "CUDA" : "CPU",
                                in.threads,
                                in.feeds_step_time ? "their times replace the profile's attention term (--step-time measured)"
                                                   : "not the simulated device; they do not enter the simulated time")},
        {"measured limit", in.limit_probed ? fmt::format("{:.1f} GB/s {}", lim.read_gbs, in.limit_what)
                                           : fmt::format("{:.1f} GB/s read, {:.1f} GB/s copy ({} threads)", lim.read_gbs,
                                                         lim.copy_gbs, in.threads)},
        {"attention (measured)", fmt::format("{} of {} ubatches timed, {:.2f} GB/s = {:.0f}% of the {} limit", a.rows().size(),
                                             in.sampler->seen(), gbs, pct(gbs), in.limit_probed ? in.limit_what : "read")},
        {"  1 token per stream", fmt::format("{} ubatches, {:.3f} s, {:.2f} GB/s = {:.0f}%", one.ubatches, one.ns * 1e-9,
                                            one.gbs(), pct(one.gbs()))},
        {"  more tokens", fmt::format("{} ubatches, {:.3f} s, {:.2f} GB/s (more arithmetic per byte)", more.ubatches,
                                     more.ns * 1e-9, more.gbs())},
        {"K-shift events", fmt::format("{}{}", a.shift_events(),
                                       hazards ? fmt::format(" ({} with upstream's null-rotation hazard)", hazards) : "")},
    };
    if (in.verify) {
        const verify_stats & v = *in.verify;
        rows.emplace_back("verify", fmt::format("{} sequences at {} steps, max |err| {:.2e}, {} failures", v.sequences,
                                                v.steps, v.max_err, v.failures));
    }
    return rows;
}

}  // namespace kvsim
