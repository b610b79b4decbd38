// kvsim: replay LLM inference workloads through a faithful re-implementation of llama.cpp's
// KV cache. Thin CLI: parsing here, everything else in lib/ and kernels/.
#include "cpu/cpu_isa.h"
#include "common/calibrate_cli.h"
#include "common/cli_checks.h"
#include "common/devices_cli.h"
#include "common/help_format.h"
#include "common/llama_args.h"
#include "common/plan_cli.h"
#include "common/replay_cli.h"
#include "common/stdout_status.h"
#include "replay/run_replay.h"
#include "trace/convert.h"
#include "trace/inspect.h"
#include "core/errors.h"
#include "util/interrupt.h"

#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char ** argv) {
    using namespace kvsim;
    ignore_sigpipe();   // a closed pipe is a write error (temporary files removed, exit 1), not a kill
    CLI::App app{"kvsim: what happens to a llama.cpp KV cache under a real multi-sequence workload"};
    use_help_formatter(app, true);
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvsim 0.1.0");
    CLI::App * replay = app.add_subcommand("replay", "Replay an op trace or a request trace through the KV cache");
    replay_cli rc;
    rc.add_to(*replay);

    CLI::App * plan = app.add_subcommand("plan", "Rank llama-server settings (-np, -c, -ctk/-ctv, -kvu, -ub, --cache-ram) for a "
                                                 "request trace within a device's memory");
    plan_cli pc;
    pc.add_to(*plan);

    CLI::App * inspect = app.add_subcommand("inspect", "Statistics of a trace before replaying it");
    std::string insp_trace, insp_format = "auto";
    bool insp_json = false;
    int32_t block_tokens = 512;
    inspect->add_option("trace", insp_trace, "Op trace or request trace")->required();
    inspect->add_option("--format", insp_format, "Trace format (default: detected from the header)")
        ->check(CLI::IsMember({"auto", "ops", "azure", "mooncake", "burstgpt"}));
    inspect->add_flag("--json", insp_json, "Print the statistics as JSON");
    inspect->add_option("--block-tokens", block_tokens, "Tokens per Mooncake hash_id block")->check(CLI::Range(1, 2147483647));

    CLI::App * convert = app.add_subcommand("convert", "Rewrite a request trace in another format");
    std::string conv_in, conv_out, conv_to, conv_from = "auto";
    convert->add_option("in", conv_in, "Request trace to read")->required();
    convert->add_option("out", conv_out, "File to write (atomically); - for standard output")->required()->check(non_empty_name(false));
    convert->add_option("--to", conv_to, "Target format")->required()->check(CLI::IsMember({"azure", "mooncake", "burstgpt", "ops"}));
    convert->add_option("--from", conv_from, "Source format (default: detected)")->check(CLI::IsMember({"auto", "azure", "mooncake", "burstgpt"}));
    convert->add_option("--block-tokens", block_tokens, "Tokens per generated Mooncake hash_id block")->check(CLI::Range(1, 2147483647));

    CLI::App * calibrate = app.add_subcommand("calibrate", "Fit a device profile (--device FILE) to llama-bench results (-o json, -o jsonl or its markdown table)");
    calibrate_cli cc;
    cc.add_to(*calibrate);

    CLI::App * devices = app.add_subcommand("devices", "The shipped device profiles (--device NAME): sources and the error of "
                                                       "their simulated times");
    devices_cli dc;
    dc.add_to(*devices);

    std::vector<std::string> args = rewrite_llama_args(argc, argv);
    if (const std::string why = bad_assignment(std::vector<std::string>(argv, argv + argc), args); !why.empty()) {
        std::cerr << "kvsim: error: " << escape_controls(why) << '\n';
        return EXIT_BAD_INPUT;
    }
    std::vector<const char *> cargs;
    for (const auto & a : args) cargs.push_back(a.c_str());
    try {
        app.parse((int) cargs.size(), cargs.data());
    } catch (const CLI::ParseError & e) {
        const int code = app.exit(e);
        return stdout_status("kvsim", code == 0 ? EXIT_OK : EXIT_BAD_INPUT);
    }
    int status = EXIT_OK;   // of the command that ran; standard output's own failure is checked once, at the end
    try {
        cpu::check_cpu_isa_env();
        if (replay->parsed()) status = rc.run(std::cout);
        if (plan->parsed()) status = pc.run(std::cout);
        if (calibrate->parsed()) status = cc.run(std::cout);
        if (devices->parsed()) status = dc.run(std::cout);
        if (inspect->parsed()) {
            const auto j = inspect_trace(insp_trace, insp_format, block_tokens);
            if (insp_json) {
                std::cout << j.dump(2) << '\n';
            } else {
                print_inspect(std::cout, insp_trace, j);
            }
        }
        if (convert->parsed()) {
            dash_is_stdout(conv_out);   // as calibrate -o -
            const size_t n = convert_trace(conv_in, conv_out, conv_to, conv_from, std::cerr, block_tokens);
            std::cerr << "kvsim: wrote " << n << " requests to " << escape_controls(conv_out) << '\n';
        }
    } catch (const input_error & e) {
        std::cerr << "kvsim: error: " << escape_controls(e.what()) << '\n';
        return EXIT_BAD_INPUT;
    } catch (const usage_error & e) {
        std::cerr << "kvsim: error: " << escape_controls(e.what()) << '\n';
        return EXIT_BAD_INPUT;
    } catch (const std::exception & e) {
        std::cerr << "kvsim: error: " << escape_controls(e.what()) << '\n';
        return EXIT_FAILURE_INTERNAL;
    }
    return stdout_status("kvsim", status);
}
