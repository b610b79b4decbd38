#include "common/plan_cli.h"
#include "common/cli_checks.h"

#include "core/errors.h"
#include "plan/plan.h"
#include "plan/plan_report.h"
#include "replay/replay_options.h"
#include "util/atomic_file.h"
#include "util/interrupt.h"
#include "util/json_read.h"
#include "util/read_file.h"
#include "util/progress.h"

#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>

namespace kvsim {

void plan_cli::add_to(CLI::App & cmd) {
    base.add_workload(cmd);
    base.add_server(cmd);
    cmd.get_option("trace")->required(false)->description("Request trace (Azure CSV, Mooncake JSONL, BurstGPT CSV)");   // absent with merge
    cmd.add_option("--parallel", n_parallel, "Grid: server slots (llama.cpp -np), comma-separated [default: 1,2,4,8]")
        ->delimiter(',');
    cmd.add_option("-c,--ctx-size", n_ctx, "Grid: context sizes in tokens, shared by the slots as llama-server shares -c "
                   "[default: 16384,32768,65536,131072]")
        ->delimiter(',');
    cmd.add_option("--cache-type-k", type_k, "Grid: K cache types (llama.cpp -ctk) [default: f16,q8_0]")->delimiter(',');
    cmd.add_option("--cache-type-v", type_v, "Grid: V cache types (llama.cpp -ctv) [default: the point's K type]")->delimiter(',');
    cmd.add_option("--kv-unified", kv_unified, "Grid: one KV stream for all slots (llama.cpp -kvu): on, off [default: off,on]")
        ->delimiter(',')
        ->check(CLI::IsMember({"on", "off"}));
    cmd.add_option("--ubatch-size", n_ubatch, "Grid: physical batch sizes (llama.cpp -ub) [default: 512]")->delimiter(',');
    cmd.add_option("--cache-ram", cache_ram, "Grid: host-RAM prompt cache in MiB (llama-server -cram; -1 = no limit, 0 = off) "
                   "[default: 8192]")
        ->delimiter(',');
    cmd.add_option("--memory", memory, "The device's memory: 24GiB, 24576MiB or bytes (default: the --device profile's "
                                       "memory_mib; required for a profile without one, such as cpu)");
    cmd.add_option("--fit-target", fit_target_mib, "MiB left free on the device, as llama-server's --fit target (-fitt)")
        ->capture_default_str();
    cmd.add_option("--slo-ttft", slo_ttft, "Objective: time to first token in seconds (0 = none)")->capture_default_str();
    cmd.add_option("--slo-tpot", slo_tpot, "Objective: time per output token in seconds (0 = none)")->capture_default_str();
    cmd.add_flag("--find-rate", find_rate, "Per configuration, the highest request rate it sustains within the objectives "
                 "(bisection over --rate-scale: about 8-12 replays per configuration)");
    cmd.add_option("--slo-attainment", slo_attainment, "--find-rate: fraction of requests that must meet the objectives")
        ->capture_default_str();
    cmd.add_option("--rate-steps", rate_steps, "--find-rate: bisection steps once the rate is bracketed")->capture_default_str();
    cmd.add_option("--max-points", max_points, "Refuse a grid of more points than this")->capture_default_str();
    cmd.add_option("-j,--jobs", jobs, "Points replayed at once (0 = every core)")->capture_default_str();
    cmd.add_option("--out", out_dir, "Directory for plan.csv, plan.json and plan.html")->check(non_empty_name());
    cmd.add_flag("--no-progress", base.no_progress, "Never draw a progress bar");
    cmd.add_flag("--progress", base.force_progress, "Draw a progress bar even when stderr is not a terminal");
    cmd.add_option("--shard", shard, "Run only shard i/n of the grid's points (their number % n == i); join with kvsim plan merge");
    cmd.add_option("--top", top, "Rows of the ranked table on the terminal (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
    merge = cmd.add_subcommand("merge", "Join the plan.json of every shard (--shard i/n) into the whole plan");
    merge->add_option("files", merge_files, "The shards' plan.json")->required();
    merge->add_option("--out", out_dir, "Directory for plan.csv, plan.json and plan.html")->check(non_empty_name());
    merge->add_option("--top", top, "Rows of the ranked table on the terminal (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
}

namespace {
std::vector<ggml_type> parse_types(const std::vector<std::string> & names, const char * flag) {
    std::vector<ggml_type> v;
    for (const auto & n : names) {
        try {
            v.push_back(parse_ggml_type(n));
        } catch (const std::invalid_argument & e) {
            throw usage_error(fmt::format("{} {}: {}", flag, n, e.what()));
        }
    }
    return v;
}

// The library's fields as plan's flags (plan_options::validate, then replay_options::validate).
const flag_names & plan_flags() {
    static const flag_names flags = [] {
        flag_names f = replay_cli::flags_of_fields();
        f["n_parallel"] = "-np";
        f["type_k"] = "-ctk";
        f["type_v"] = "-ctv";
        f["kv_unified"] = "-kvu";
        f["cache_ram_mib"] = "--cache-ram";
        f["slo_ttft_s"] = "--slo-ttft";
        f["slo_tpot_s"] = "--slo-tpot";
        f["memory_bytes"] = "--memory";
        f["margin_bytes"] = "--fit-target";
        f["max_points"] = "--max-points";
        f["find_rate"] = "--find-rate";
        f["slo_attainment"] = "--slo-attainment";
        f["rate_steps"] = "--rate-steps";
        f["arrivals"] = "--arrivals";
        return f;
    }();
    return flags;
}

void check_out_dir(const std::string & dir) {
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
        throw usage_error(fmt::format("--out {}: exists and is not a directory", dir));
    }
}

void write_outputs(const std::string & dir, const plan_result & r) {
    check_out_dir(dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw usage_error(fmt::format("--out {}: cannot create it ({})", dir, ec.message()));
    atomic_file csv(dir + "/plan.csv"), json(dir + "/plan.json"), html(dir + "/plan.html");
    write_plan_csv(csv.out(), r);
    json.out() << plan_json(r).dump(2) << '\n';
    write_plan_html(html.out(), r);
    for (atomic_file * f : {&csv, &json, &html}) f->finish();
    for (atomic_file * f : {&csv, &json, &html}) f->commit();
}
}  // namespace

plan_options plan_cli::finish() {
    if (base.opt.trace.empty()) throw usage_error("kvsim plan: give a request trace (or: kvsim plan merge FILE...)");
    plan_options o;
    o.base = base.finish();
    if (memory.empty() && o.base.device.memory_mib == 0) {
        throw usage_error(fmt::format("kvsim plan: --memory is required: the memory of device {} is unknown (e.g. --memory 24GiB)",
                                      o.base.device.name));
    }
    plan_grid & g = o.grid;
    if (!n_parallel.empty()) g.n_parallel = n_parallel;
    if (!n_ctx.empty()) g.n_ctx = n_ctx;
    if (!type_k.empty()) g.type_k = parse_types(type_k, "-ctk");
    g.type_v = parse_types(type_v, "-ctv");
    if (!kv_unified.empty()) {
        g.kv_unified.clear();
        for (const auto & k : kv_unified) g.kv_unified.push_back(k == "on");
    }
    if (!n_ubatch.empty()) g.n_ubatch = n_ubatch;
    if (!cache_ram.empty()) g.cache_ram_mib = cache_ram;
    try {
        // absent: the device profile's memory (nvidia-smi's total for the shipped GPUs)
        o.memory_bytes = memory.empty() ? (int64_t) (o.base.device.memory_mib << 20) : parse_memory_bytes(memory);
    } catch (const std::invalid_argument & e) {
        throw usage_error(std::string("--memory: ") + e.what());
    }
    if (fit_target_mib < 0 || fit_target_mib > (int64_t(1) << 40)) {
        throw usage_error(fmt::format("--fit-target must be in [0, 2^40] MiB, got {}", fit_target_mib));
    }
    o.margin_bytes = fit_target_mib << 20;
    o.slo = {slo_ttft, slo_tpot};
    o.max_points = max_points;
    o.jobs = jobs;
    o.find_rate = find_rate;
    o.slo_attainment = slo_attainment;
    o.rate_steps = rate_steps;
    if (!shard.empty()) o.shard = parse_shard("--shard", shard);
    return o;
}

int plan_cli::run_merge(std::ostream & term) {
    std::vector<nlohmann::json> parts;
    for (const auto & f : merge_files) {
        try {
            parts.push_back(parse_json_bounded(read_small_file(f, "plan.json", size_t(256) << 20)));
        } catch (const input_error &) {
            throw;
        } catch (const json_refused & e) {   // a key twice, a number like 1e400 (its line), too deep
            throw input_error(f, e.line, "", std::string("not readable as JSON: ") + e.what());
        } catch (const std::exception & e) {
            throw input_error(f, 0, "", std::string("not readable as JSON: ") + e.what());
        }
    }
    if (!out_dir.empty()) check_out_dir(out_dir);
    const plan_result r = merge_plan_shards(parts, merge_files);
    print_plan_table(term, r, top);
    if (!out_dir.empty()) {
        write_outputs(out_dir, r);
        term << fmt::format("  outputs in {}/ (plan.csv, plan.json, plan.html)\n", escape_controls(out_dir));
    }
    return 0;
}

int plan_cli::run(std::ostream & term) {
    if (merge && merge->parsed()) return run_merge(term);
    plan_options o;
    plan_result r;
    try {
        o = finish();
        if (!out_dir.empty()) check_out_dir(out_dir);   // a bad --out fails now, not after the whole plan
        install_interrupt_handler();
        progress_bar bar("plan", o.base.progress);
        r = run_plan(o, [&](size_t done, size_t total) { bar.update(done, total); }, [] { return interrupted(); });
        bar.finish();
    } catch (const option_error & e) {
        throw said_in_flags(e, plan_flags());
    }
    print_plan_table(term, r, top);
    if (!out_dir.empty()) {
        write_outputs(out_dir, r);
        term << fmt::format("  outputs in {}/ (plan.csv, plan.json, plan.html)\n", escape_controls(out_dir));
    }
    if (interrupted()) {
        std::cerr << "kvsim: interrupted; the outputs hold the points that finished\n";
        return 128 + interrupt_signal();
    }
    return 0;
}

}  // namespace kvsim
