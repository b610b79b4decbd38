// kvbench: attention-cost sweeps over context length, KV type and batch (kvbench sweep), merging of sharded
// sweeps (kvbench merge) and the KV-cache bookkeeping micro-benchmark (kvbench cache). Thin CLI: parsing here,
// measuring, results and writers in lib/bench/.
#include "cpu/cpu_isa.h"
#include "bench/bench_json.h"
#include "bench/bench_merge.h"
#include "bench/bench_writers.h"
#include "bench/cache_bench.h"
#include "bench/machine_probe.h"
#include "bench/sweep_runner.h"
#include "common/bench_backend.h"
#include "common/cli_checks.h"
#include "common/help_format.h"
#include "common/llama_args.h"
#include "common/stdout_status.h"
#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "replay/replay_options.h"
#include "core/errors.h"
#include "util/host_memory.h"
#include "util/interrupt.h"
#include "util/progress.h"

#include <CLI/CLI.hpp>
#include <fmt/ostream.h>

#include <cstring>
#include <iostream>

namespace {

using namespace kvsim;

// "--OPT N": N MiB, refused when above `max_mib` (the memory budget; also keeps N << 20 from overflowing).
size_t mib_bytes(const char * option, int64_t mib, size_t max_mib, size_t phys) {
    if (mib > 0 && (uint64_t) mib > max_mib) {
        throw usage_error(fmt::format("{} {}: more than 80 % of the {} MiB of physical memory (at most {} MiB{})", option,
                                      mib, phys >> 20, max_mib,
                                      std::strcmp(option, "--limit-mib") == 0 ? ": the probe allocates 2 buffers" : ""));
    }
    return (size_t) mib << 20;
}

// The flag of each library field an option_error of sweep_config::validate, run_sweep or
// compute_context_sizes (kvbench cache) may name.
const flag_names & flags_of_fields() {
    static const flag_names flags = {
        {"ctx", "--ctx"}, {"kv_types", "--kv-type"}, {"batch", "--batch"}, {"head_dim", "--head-dim"},
        {"n_head", "--n-head"}, {"n_head_kv", "--n-head-kv"}, {"threads", "--threads"}, {"repeats", "--repeats"},
        {"shard", "--shard"}, {"limit_bytes", "--limit-mib"}, {"max_buffer_bytes", "--max-buffer-mib"},
        {"n_ctx", "--ctx-size"}, {"n_seq_max", "--n-seq"},
    };
    return flags;
}

#ifdef NDEBUG
constexpr const char * build_type = "Release (NDEBUG)";
#else
constexpr const char * build_type = "Debug (assertions on)";
#endif

struct sweep_cli {
    std::string ctx = "512:131072:x2", kv_type = "f16,q8_0,q4_0", batch = "1", model, shard = "0/1";
    std::string out = "kvbench-out", format = "table";
    int64_t head_dim = 0, n_head = 0, n_head_kv = 0, max_buffer_mib = 6144, eigen_max_mib = 2048, ref_max_cells = 4096;
    int64_t limit_mib = 512;
    int threads = 2, repeats = 5;
    std::string backend = "cpu";
    CLI::Option * max_buffer_opt = nullptr;
    CLI::Option * limit_opt = nullptr;

    void add_to(CLI::App & app) {
        app.add_option("--ctx", ctx, "context lengths (cells per sequence): a:b:xF, a:b:+S or a list a,b,c")
            ->capture_default_str();
        app.add_option("--kv-type", kv_type, "K/V cache types: f16,q8_0,q4_0,f32")->capture_default_str();
        app.add_option("--batch", batch, "sequences decoding one token each (same grammar as --ctx)")
            ->capture_default_str();
        CLI::Option * m = app.add_option("--model", model, "model preset for the head shape (default llama-3-8b)");
        CLI::Option * hd = app.add_option("--head-dim", head_dim, "head size (custom shape)");
        CLI::Option * nh = app.add_option("--n-head", n_head, "query heads (custom shape)");
        CLI::Option * nk = app.add_option("--n-head-kv", n_head_kv, "KV heads (custom shape)");
        hd->needs(nh)->needs(nk)->excludes(m);
        nh->needs(hd);
        nk->needs(hd);
        app.add_option("--backend", backend, "cpu or cuda")->capture_default_str();
        app.add_option("--threads,-t", threads, "threads of the kernels, baselines and bandwidth probe")
            ->capture_default_str()
            ->check(CLI::Range(1, 1024));
        app.add_option("--repeats,-r", repeats, "timed calls per kernel and point, 1 to 1000000 (every sample is kept for the median)")->capture_default_str();
        app.add_option("--out,-o", out, "output directory (kvbench.csv/json/svg)")->capture_default_str();
        app.add_option("--format", format, "stdout format")->check(CLI::IsMember({"table", "csv", "json"}))
            ->capture_default_str();
        app.add_option("--shard", shard, "run every n-th point: i/n")->capture_default_str();
        max_buffer_opt = app.add_option("--max-buffer-mib", max_buffer_mib, "skip points whose K+V exceed this (at most 80 % of RAM)")
                             ->capture_default_str();
        app.add_option("--eigen-max-mib", eigen_max_mib, "skip the Eigen baseline above this f32 K+V")
            ->capture_default_str();
        app.add_option("--ref-max-cells", ref_max_cells, "skip the naive reference above ctx*batch cells")
            ->capture_default_str();
        limit_opt = app.add_option("--limit-mib", limit_mib, "buffer of the bandwidth probe (2 of them: at most 40 % of RAM; one is held again during each point's timed calls for %adj)")
                        ->capture_default_str();
    }

    sweep_config finish() const {
        sweep_config c;
        c.ctx = parse_int_list("--ctx", ctx);
        c.kv_types = parse_kv_types("--kv-type", kv_type);
        c.batch = parse_int_list("--batch", batch, max_batch);
        if (head_dim > 0 || n_head > 0 || n_head_kv > 0) {
            c.model = "custom";
            c.head_dim = head_dim;
            c.n_head = n_head;
            c.n_head_kv = n_head_kv;
        } else {
            const std::string name = model.empty() ? "llama-3-8b" : model;
            model_shape ms;
            try {
                ms = model_preset(name);
            } catch (const std::invalid_argument & e) {
                throw input_error("--model", 0, name, e.what());
            }
            c.model = name;
            c.head_dim = ms.head_dim;
            c.n_head = ms.n_head;
            c.n_head_kv = ms.n_head_kv;
            c.rope_neox = ms.rope == rope_type::neox;
            c.rope_freq_base = ms.rope_freq_base;
        }
        c.backend = backend;
        // twice the last-level cache cycles between calls, so that no point is timed from the cache (this VM
        // reports a 300 MiB L3)
        c.rotate_bytes = std::max(c.rotate_bytes, 2 * last_level_cache_bytes());
        c.threads = threads;
        c.repeats = repeats;
        if (max_buffer_mib < 1 || eigen_max_mib < 0 || limit_mib < 1 || ref_max_cells < 0) {
            throw input_error("sweep", 0, "", "--max-buffer-mib/--limit-mib must be >= 1, caps >= 0");
        }
        // buffers must fit in 80 % of physical memory (beyond it a run ends in bad_alloc or the OOM killer): a value
        // given on the command line is refused, the default --max-buffer-mib is lowered to the budget
        const size_t phys = physical_memory_bytes();
        const size_t budget_mib = phys ? memory_budget_bytes(phys) >> 20 : (SIZE_MAX >> 21);
        int64_t max_buf = max_buffer_mib;
        if (max_buffer_opt->count() == 0 && (uint64_t) max_buf > budget_mib) max_buf = (int64_t) budget_mib;
        c.max_buffer_bytes = mib_bytes("--max-buffer-mib", max_buf, budget_mib, phys);
        c.eigen_max_bytes = mib_bytes("--eigen-max-mib", eigen_max_mib, budget_mib, phys);
        c.ref_max_cells = ref_max_cells;
        c.limit_bytes = mib_bytes("--limit-mib", limit_mib, budget_mib / 2, phys);
        (void) limit_opt;
        c.shard = parse_shard("--shard", shard);
        c.validate(phys);
        return c;
    }
};

void print_output(const sweep_output & o, const std::string & format) {
    if (format == "csv") {
        write_csv(std::cout, o);
    } else if (format == "json") {
        std::cout << to_json(o).dump(2) << '\n';
    } else {
        write_table(std::cout, o);
    }
}

int run_sweep_cmd(const sweep_cli & cli) {
    const sweep_config c = cli.finish();
    check_output_dir("--out", cli.out);   // before measuring: a bad -o must not cost a whole sweep
    bench_backend bb = make_bench_backend(c.backend, c.threads);
    // SIGINT, SIGTERM and SIGHUP: the sweep stops after the current point (lib/util/interrupt.h)
    install_interrupt_handler("\nkvbench: stopping after the current point (press Ctrl-C again to stop now)\n");
    progress_bar bar("kvbench sweep", std::nullopt);
    sweep_hooks hooks;
    hooks.stop = interrupt_flag();
    hooks.progress = [&](size_t done, size_t total) { bar.update(done, total); };
    hooks.clock = bb.clock;
    hooks.measure_limit = bb.measure_limit;
    machine_info m = collect_machine_info(build_type);
    if (!bb.device.empty()) m.gpu = bb.device;
    if (const auto * cpu = dynamic_cast<const cpu_backend *>(bb.be.get())) m.kernel_path = cpu->path_name();
    const sweep_output o = run_sweep(*bb.be, c, m, hooks);
    bar.finish();
    write_outputs(cli.out, o);
    print_output(o, cli.format);
    std::cerr << fmt::format("kvbench: wrote {0}/kvbench.csv, {0}/kvbench.json, {0}/kvbench.svg\n", cli.out);
    if (o.interrupted) return interrupt_signal() ? 128 + interrupt_signal() : EXIT_INTERRUPTED;
    if (sweep_exit_code(o) != 0) {
        std::cerr << "kvbench: point(s) FAILED the output check against the reference/Eigen (see the table)\n";
        return EXIT_FAILURE_INTERNAL;
    }
    return EXIT_OK;
}

int run_merge_cmd(const std::vector<std::string> & inputs, const std::string & out, const std::string & format) {
    check_output_dir("--out", out);
    std::vector<sweep_output> parts;
    std::vector<std::string> names;   // the shard files, for merge_outputs' messages
    for (const std::string & in : inputs) {
        parts.push_back(read_output(in));
        names.push_back(kvbench_json_path(in));
    }
    const sweep_output o = merge_outputs(parts, names);
    write_outputs(out, o);
    print_output(o, format);
    return EXIT_OK;
}

int run_cache_cmd(const cache_bench_params & base) {
    if (base.n_seq < 1 || base.n_seq > 32) throw input_error("--n-seq", 0, std::to_string(base.n_seq), "must be in [1, 32]");
    if (base.n_ops < 1) throw input_error("--ops", 0, "0", "must be >= 1");
    try {
        model_preset(base.model);
    } catch (const std::invalid_argument & e) {
        throw input_error("--model", 0, base.model, e.what());
    }
    context_params cp;   // the context run_cache_bench builds, refused before the table starts
    cp.n_ctx = base.n_ctx;
    cp.n_seq_max = base.n_seq;
    compute_context_sizes(model_preset(base.model), cp);
    fmt::print("kvbench cache: {} ops, seed {}, {} sequences, -c {}, model {}\n", base.n_ops, base.seed, base.n_seq,
               base.n_ctx, base.model);
    fmt::print("{:>13} {:>8} {:>7} {:>9} {:>9} {:>9} {:>11} {:>8} {:>12} {:>10}\n", "layout", "kv_size", "streams",
               "ops", "decodes", "no_slot", "tokens", "secs", "ops/s", "ns/token");
    for (bool unified : {true, false}) {
        cache_bench_params p = base;
        p.unified = unified;
        const cache_bench_result r = run_cache_bench(p);
        fmt::print("{:>13} {:>8} {:>7} {:>9} {:>9} {:>9} {:>11} {:>8.2f} {:>12.0f} {:>10.1f}\n", r.layout, r.kv_size,
                   r.n_stream, r.n_ops, r.n_decode, r.n_no_slot, r.n_tokens_placed, r.seconds, r.ops_per_s(),
                   r.ns_per_token());
    }
    fmt::print("ns/token = whole trace time (seq ops included) / tokens placed by successful decodes\n");
    return EXIT_OK;
}

}  // namespace

int main(int argc, char ** argv) {
    ignore_sigpipe();   // as kvsim: a closed pipe is a write error (exit 1, stdout_status says so), not a kill
    CLI::App app{"kvbench: attention cost of a llama.cpp KV cache vs context length, KV type and batch"};
    use_help_formatter(app, false);
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvbench 0.1.0");
    CLI::App * sweep = app.add_subcommand("sweep", "Time mask build/update, flash-attention decode and K-shift per point");
    sweep->footer(
        "Columns (CPU backend): GB/s = K+V bytes of one call / its median time. %lim = GB/s / the read bandwidth the\n"
        "probe measured at the start of the run. %adj = median over the timed calls of the call's GB/s / one probe\n"
        "pass right after it (same second). %roof = the kernel's compute roof (one thread with K/V in its L2, per-call\n"
        "work excluded, times the threads up to the cores: its speed if memory cost nothing) / that same probe pass;\n"
        "below 100 the point is compute-bound and %adj cannot reach 100, above 100 memory-bound. The probe pass\n"
        "and the roof add about 30 ms per timed call. Every point is checked before it is timed: the first call's\n"
        "output against the naive reference (and Eigen after the timing) with the backend's tolerance; a point off by\n"
        "more, or NaN, is 'failed', gets no time, and kvbench exits 1. Field reference: docs/benchmarks.md,\n"
        "\"kvbench columns\".");
    sweep_cli sc;
    sc.add_to(*sweep);
    CLI::App * merge = app.add_subcommand("merge", "Join the kvbench.json of shard runs into one set of outputs");
    std::vector<std::string> merge_in;
    std::string merge_out, merge_format = "table";
    merge->add_option("dirs", merge_in, "shard output directories (or kvbench.json files)")->required();
    merge->add_option("--out,-o", merge_out, "output directory")->required();
    merge->add_option("--format", merge_format, "stdout format")->check(CLI::IsMember({"table", "csv", "json"}));
    CLI::App * cache = app.add_subcommand("cache", "Throughput of the KV-cache bookkeeping alone (no kernels)");
    cache_bench_params cp;
    // a negative count wrapped to 2^64 - 1 and ended in "cannot create std::vector larger than max_size()", exit 1
    cache->add_option("--ops", cp.n_ops, "ops in the random trace, 1 to 100000000")->capture_default_str()->check(CLI::Range(1, 100000000));
    cache->add_option("--seed", cp.seed, "trace seed")->capture_default_str();
    cache->add_option("--n-seq,--parallel", cp.n_seq, "sequences (1..32)")->capture_default_str();
    cache->add_option("--ctx-size,-c", cp.n_ctx, "context size (cells, all streams)")->capture_default_str();
    cache->add_option("--model", cp.model, "model preset")->capture_default_str();

    const std::vector<std::string> typed(argv, argv + argc);
    if (const std::string why = bad_assignment(typed, typed); !why.empty()) {
        std::cerr << "kvbench: error: " << escape_controls(why) << '\n';
        return EXIT_BAD_INPUT;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        const int code = app.exit(e);
        return stdout_status("kvbench", code == 0 ? EXIT_OK : EXIT_BAD_INPUT);
    }
    int status = EXIT_OK;   // of the command that ran; standard output's own failure is checked once, at the end
    try {
        cpu::check_cpu_isa_env();
        if (sweep->parsed()) status = run_sweep_cmd(sc);
        if (merge->parsed()) status = run_merge_cmd(merge_in, merge_out, merge_format);
        if (cache->parsed()) status = run_cache_cmd(cp);
    } catch (const option_error & e) {
        std::cerr << "kvbench: error: " << escape_controls(said_in_flags(e, flags_of_fields()).what()) << '\n';
        return EXIT_BAD_INPUT;
    } catch (const input_error & e) {
        std::cerr << "kvbench: error: " << escape_controls(e.what()) << '\n';
        return EXIT_BAD_INPUT;
    } catch (const usage_error & e) {
        std::cerr << "kvbench: error: " << escape_controls(e.what()) << '\n';
        return EXIT_BAD_INPUT;
    } catch (const std::exception & e) {
        std::cerr << "kvbench: error: " << escape_controls(e.what()) << '\n';
        return EXIT_FAILURE_INTERNAL;
    }
    return stdout_status("kvbench", status);
}
