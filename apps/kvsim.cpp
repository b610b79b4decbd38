// kvsim: replay LLM inference workloads through a faithful re-implementation of llama.cpp's
// KV cache. Thin CLI: parsing here, everything else in lib/ and kernels/.
#include "common/llama_args.h"
#include "common/replay_cli.h"
#include "replay/run_replay.h"
#include "util/errors.h"

#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char ** argv) {
    using namespace kvsim;
    CLI::App app{"kvsim: what happens to a llama.cpp KV cache under a real multi-sequence workload"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvsim 0.1.0");
    CLI::App * replay = app.add_subcommand("replay", "Replay an op trace or a request trace through the KV cache");
    replay_cli rc;
    rc.add_to(*replay);

    std::vector<std::string> args = rewrite_llama_args(argc, argv);
    std::vector<const char *> cargs;
    for (const auto & a : args) cargs.push_back(a.c_str());
    try {
        app.parse((int) cargs.size(), cargs.data());
    } catch (const CLI::ParseError & e) {
        const int code = app.exit(e);
        return code == 0 ? EXIT_OK : EXIT_BAD_INPUT;
    }
    try {
        if (replay->parsed()) {
            return rc.run(std::cout);
        }
    } catch (const input_error & e) {
        std::cerr << "kvsim: error: " << e.what() << '\n';
        return EXIT_BAD_INPUT;
    } catch (const usage_error & e) {
        std::cerr << "kvsim: error: " << e.what() << '\n';
        return EXIT_BAD_INPUT;
    } catch (const std::exception & e) {
        std::cerr << "kvsim: error: " << e.what() << '\n';
        return EXIT_FAILURE_INTERNAL;
    }
    return EXIT_OK;
}
