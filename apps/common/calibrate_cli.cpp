#include "common/calibrate_cli.h"
#include "common/cli_checks.h"

#include "common/replay_cli.h"
#include "replay/replay_options.h"
#include "time/calibrate.h"
#include "util/atomic_file.h"
#include "core/errors.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

namespace kvsim {

void calibrate_cli::add_to(CLI::App & cmd) {
    cmd.add_option("bench", files, "llama-bench results, one or more files: -o json or -o jsonl output, or the markdown table llama-bench prints by default (as published in issues and posts); several weight types of one model are fitted together")->required();
    cmd.add_option("--model", model_names, "Model presets the results were measured on, comma-separated: each result is "
                                           "matched to the first whose parameter count and file size it has (default: every preset; "
                                           "results of models of several layer counts fit a per-layer cost and a read rate per "
                                           "weight type): " + fmt::format("{}", fmt::join(model_preset_names(), ", ")))
        ->delimiter(',')
        ->allow_extra_args(false);   // one value per --model: the bench files after it are not models
    cmd.add_option("--weights", weights, "GGUF file type (default: read from the results' model_type): " +
                                             fmt::format("{}", fmt::join(weight_file_type_names(), ", ")));
    cmd.add_option("--device", device, "Base profile whose bandwidth and peak the fitted fractions refer to: a shipped name, "
                                        "host or a profile file")
        ->capture_default_str();
    cmd.add_option("-t,--threads", threads, "Threads of --device host's read probe (0 = all cores)")
        ->check(CLI::Range(0, 1024))   // as kvsim replay -t: 100000 threads ended in std::terminate
        ->capture_default_str();
    cmd.add_option("-o,--out", out, "Write the fitted profile here (JSON, for kvsim replay --device FILE); default or -: print it")
        ->check(non_empty_name());
    cmd.add_option("--name", name, "Name of the fitted profile")->capture_default_str();
    cmd.add_option("--attention-cells", attention_cells, "Charge attention for every cell up to n_kv (GPU kernels) or for the "
                                                         "cells each token sees (visible: ggml's CPU flash attention skips masked "
                                                         "cells); default: the base profile's (n_kv)")
        ->check(CLI::IsMember({"n_kv", "visible"}));
    cmd.add_flag("--predict", predict, "Fit nothing: predict every result with the --device profile and print the errors "
                                       "(held-out results, or a shipped profile against published numbers)");
}

namespace {
// The profile must load back (kvsim replay --device FILE): one that parse_device_profile refuses is not written.
void refuse_unloadable(const nlohmann::json & profile, const std::vector<std::string> & files) {
    try {
        (void) parse_device_profile(profile, "the fitted profile");
    } catch (const input_error & e) {
        throw usage_error(fmt::format("kvsim calibrate: {}; the results ({}) do not look like one model on one machine", e.what(),
                                      fmt::join(files, ", ")));
    }
}
}  // namespace

int calibrate_cli::run(std::ostream & term) {
    // `-o -`, the usual name of standard output: the profile alone there, for a pipe or a redirect (a file named '-' was
    // written); the report goes to standard error
    const bool profile_only = out == "-";
    if (profile_only) out.clear();
    std::ostream & report = profile_only ? std::cerr : term;
    std::vector<model_shape> models;
    const weight_file_type * wt = nullptr;
    try {
        // "a, b" as "a,b"; a name twice once
        std::vector<std::string> names;
        for (std::string n : model_names.empty() ? model_preset_names() : model_names) {
            n.erase(0, n.find_first_not_of(' '));
            n.erase(n.find_last_not_of(' ') + 1);
            if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
        for (const auto & n : names) models.push_back(model_preset(n));
        if (!weights.empty()) wt = &parse_weight_file_type(weights);
    } catch (const std::invalid_argument & e) {
        throw usage_error(e.what());
    }
    // -o over an input (or the --device profile) would replace the measurements with the fit
    if (!out.empty()) {
        std::error_code ec;
        std::vector<std::string> inputs = files;
        inputs.push_back(device);
        for (const auto & f : inputs) {
            if (f == out || std::filesystem::equivalent(f, out, ec)) {
                throw usage_error(fmt::format("-o {} is an input ({}); write the profile to another file", out, f));
            }
        }
    }
    if (predict && (profile_only || !out.empty())) throw usage_error("--predict fits nothing, so there is no profile to write with -o");
    // a bad -o is reported before a fit of minutes (checked, not kept open: an interrupted fit leaves no file)
    if (!out.empty()) atomic_file::check(out);
    // the profile's name as the profile file's checks take it, before the fit (a control byte was refused after it)
    check_profile_name(name, "--name");
    // every file is read and checked before any work or output
    std::vector<llama_bench_row> points;
    for (const auto & f : files) {
        auto v = read_llama_bench(f);
        points.insert(points.end(), v.begin(), v.end());
    }
    device_profile base = resolve_device(device, threads);
    if (!attention_cells.empty()) base.attention_cells = attention_cells;
    if (predict) {
        const calibration_result r = predict_bench(points, models, wt, base);
        report << fmt::format("kvsim calibrate --predict: {} llama-bench results of {} ({} weights) on profile {} ({})\n", points.size(),
                            r.models_text(), r.weights_text(), base.name, base.source);
        print_calibration(report, r);
        return EXIT_OK;
    }
    calibration_result r = calibrate(points, models, wt, base);
    r.profile.name = name;
    nlohmann::json j = device_profile_json(r.profile);
    nlohmann::json src = nlohmann::json::array();
    for (const auto & f : files) src.push_back(f);
    std::vector<double> errs;
    for (const auto & p : r.points) errs.push_back(p.error());
    std::vector<std::string> kv;   // the runs' K/V cache types, in order of first appearance
    for (const auto & p : r.points) {
        const std::string t = p.bench.type_k + "/" + p.bench.type_v;
        if (std::find(kv.begin(), kv.end(), t) == kv.end()) kv.push_back(t);
    }
    j["calibration"] = {{"model", r.models_text()}, {"weights", r.weights_text()}, {"kv", fmt::format("{}", fmt::join(kv, " + "))},
                        {"files", src}, {"results", r.points.size()}, {"base_device", base.name}, {"notes", r.notes}};
    // the profile must load back (kvsim replay --device FILE): a fit outside parse_device_profile's
    // ranges is refused here, not by a later replay
    double max_fraction = r.profile.weight_read_fraction;
    for (const auto & [type, f] : r.profile.weight_read_fraction_by_type) max_fraction = std::max(max_fraction, f);
    for (const auto & g : r.profile.gemm_fraction) max_fraction = std::max(max_fraction, g.second);
    if (max_fraction > 10) {   // e.g. GPU results fitted against the default --device cpu
        throw usage_error(fmt::format("kvsim calibrate: the fit reaches {:.3g}x the peak of --device {} ({:g} GB/s, {:g} TFLOP/s): "
                                      "the results are from a much faster machine; pass its profile (--device NAME|FILE|host){}",
                                      max_fraction, device, base.bandwidth_gbs, base.peak_tflops,
                                      base.n_sm > 0 ? fmt::format(", or check its n_sm ({}): GEMMs are counted in waves of that many tiles", base.n_sm) : ""));
    }
    refuse_unloadable(device_profile_json(r.profile), files);
    report << fmt::format("kvsim calibrate: {} llama-bench results of {} ({} weights), base profile {} ({:.1f} GB/s, {:.2f} TFLOP/s)\n",
                        points.size(), r.models_text(), r.weights_text(), base.name, base.bandwidth_gbs, base.peak_tflops);
    print_calibration(report, r);
    const held_out_errors held = held_out_fit(points, models, wt, base);
    report << held_out_line(held, points.size());
    if (!held.errs.empty()) {
        j["calibration"]["held_out"] = {{"method", held.method}, {"results", held.errs.size()},
                                        {"median_abs_error", abs_error_quantile(held.errs, 0.5)},
                                        {"max_abs_error", abs_error_quantile(held.errs, 1.0)}};
        refuse_unloadable(j, files);   // a held-out error past 1000x is no profile (a result 1000x off in-sample: calibrate refuses it first)
    }
    const auto & d = r.profile;
    std::string gemms;
    for (const auto & [tokens, f] : d.gemm_fraction) {
        gemms += fmt::format("{}{:.3f} TFLOP/s ({:.3f}) at {:g} tokens", gemms.empty() ? "" : ", ", f * d.peak_tflops, f, tokens);
    }
    std::string by_type;
    for (const auto & [type, f] : d.weight_read_fraction_by_type) by_type += fmt::format("{}{} {:.1f}", by_type.empty() ? "" : ", ", type, f * d.bandwidth_gbs);
    if (d.float_gemm_extra_s_per_byte > 0) {
        by_type += fmt::format("{}float weights in ubatches of 2+ tokens {:.3f} ns more per KiB", by_type.empty() ? "" : "; ",
                               d.float_gemm_extra_s_per_byte * 1e9 * 1024);
    }
    report << fmt::format("fitted: weight reads {:.1f} GB/s ({:.3f} of {:.1f}){}; GEMMs {} (float weights {:.2f}x); {:.1f} us per ubatch + "
                        "{:.2f} us per layer (+ {:.2f} us per layer of a ubatch of 2 tokens or more); attention {:.4f} ns per K/V KiB + {:.4f} ns per MFLOP{}{}\n",
                        d.weight_read_fraction * d.bandwidth_gbs, d.weight_read_fraction, d.bandwidth_gbs,
                        by_type.empty() ? "" : fmt::format(" (by weight type, GB/s: {})", by_type), gemms, d.float_gemm_speedup,
                        d.ubatch_overhead_s * 1e6, d.layer_overhead_s * 1e6, d.gemm_layer_overhead_s * 1e6, d.attn_s_per_kv_byte * 1e9 * 1024, d.attn_s_per_flop * 1e15,
                        d.repack_rows ? fmt::format("; repacked matmul: {:.3f} ms per extra pass over 1 GB of weights ({} tokens per gemm); "
                                                    "unpacked matrices: {:.2f} ms per row per 1e9 parameters; "
                                                    "{:.3f} ns per cell scanned past the mask",
                                                    d.extra_pass_s_per_byte * 1e12, d.repack_rows, d.unpacked_s_per_param_row * 1e12,
                                                    d.attn_s_per_scanned_cell * 1e9)
                                      : "",
                        d.k_shift_s_per_theta > 0 ? fmt::format("; K-shift {:.2f} ns per rotation angle", d.k_shift_s_per_theta * 1e9) : "");
    // a results file's name that is not UTF-8 is written with U+FFFD (nlohmann's strict dump threw after the fit)
    // on standard output non-ASCII is written as \uXXXX: a file name's C1 control (U+009B, a terminal's CSI) stays text
    const std::string text = j.dump(2, ' ', out.empty(), nlohmann::json::error_handler_t::replace);
    if (out.empty()) {
        term << text << '\n';
    } else {
        atomic_file f(out);
        f.out() << text << '\n';
        f.commit();
        report << "kvsim: wrote " << escape_controls(out) << '\n';
    }
    return EXIT_OK;
}

}  // namespace kvsim
