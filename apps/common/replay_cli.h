// The options of `kvsim replay`, with llama.cpp's CLI names where llama.cpp has the knob.
#pragma once

#include "common/llama_args.h"
#include "replay/replay_options.h"

#include <CLI/CLI.hpp>

namespace kvsim {

// --device: a shipped profile name, host (measures this machine's read bandwidth with the read
// probe of kernels/bandwidth.h on `threads` threads, 0 = all cores) or a profile JSON file.
// Throws usage_error for anything else (naming `flag`: the option or command that gave the name), input_error for
// a bad file.
device_profile resolve_device(const std::string & name, int threads, const char * flag = "--device");

// Registers the options on `cmd`; call finish_replay_options after parsing.
struct replay_cli {
    replay_options opt;
    std::string model_name = "llama-3-8b";
    std::string type_k = "f16", type_v = "f16", flash_attn = "auto", swa_type_name, rope_scaling_name;
    std::optional<uint32_t> n_layer, n_head, n_head_kv, head_dim, n_swa, swa_pattern;
    bool no_progress = false, force_progress = false, no_cache_prompt = false;
    int32_t n_parallel = -1;   // -np; -1 = auto
    std::string arrivals = "trace", device = "h200", weights = "f16";
    std::optional<double> bandwidth_gbs, peak_tflops;
    std::string step_time = "roofline";
    // speculative decoding: -md, --spec-type, -ctkd, -ctvd
    std::string draft_model_name, spec_type = "none", type_k_draft = "f16", type_v_draft = "f16";
    std::optional<double> synth_len;   // --spec-synth-len
    // llama-server's sizing of an unset -c (replay/server_sizing.h): --fit, -fitc, -fitt, --device-memory
    std::string fit = "on";
    std::optional<std::string> device_memory;   // unset = the profile's; given empty is refused
    std::optional<uint32_t> fit_ctx;
    std::optional<int64_t> fit_target_mib;
    // Options that only shape the simulated server (refused on an op trace when given), and the
    // context-shift knobs (refused without --context-shift when given).
    std::vector<CLI::Option *> request_only, shift_only;
    // Options refused when they would change nothing (check_given_options).
    CLI::Option *opt_kv_unified = nullptr, *opt_idle_slots = nullptr, *opt_checkpoints = nullptr, *opt_checkpoint_step = nullptr;
    CLI::Option *opt_ctx = nullptr;   // -c: given as 0, it turns --fit's shrinking off (common/arg.cpp)

    void add_to(CLI::App & cmd);   // every section below, in this order
    // The trace, the model shape and the context settings a plan does not vary (-b, --swa-full, -fa).
    void add_workload(CLI::App & cmd);
    // The settings `kvsim plan` searches (-c, -np, -ub, -kvu, -ctk, -ctv, --cache-ram): plan registers lists instead.
    void add_sizing(CLI::App & cmd);
    // The simulated llama-server, its device and weights, the trace's slice and rate.
    void add_server(CLI::App & cmd);
    // llama-server's sizing of a context -c leaves unset (--fit, -fitc, -fitt, --kv-unified-per-slot, --device-memory).
    void add_fit(CLI::App & cmd);
    // Output files, terminal, progress and the real kernels.
    void add_outputs(CLI::App & cmd);
    // llama-server's speculative decoding with a draft model (-md, --spec-*, -ctkd, -ctvd, --emit-draft-ops).
    void add_spec(CLI::App & cmd);
    // llama.cpp's RoPE context flags (--rope-scaling, --rope-scale, --rope-freq-*, --yarn-*), in add_workload.
    void add_rope(CLI::App & cmd);
    // Resolve the model preset and overrides, types and flags. Throws usage_error.
    replay_options finish();
    // finish()'s checks of options that were given but would do nothing. Throws usage_error.
    void check_given_options(replay_options & o) const;
    // finish()'s --fit fields (-fit, -fitc, -fitt, -c 0, --device-memory). Throws usage_error.
    void finish_fit(replay_options & o) const;
    // finish(), create the kernel hooks for --backend, run the replay; returns the exit status
    // (EXIT_OK, or EXIT_FAILURE_INTERNAL when --verify found a mismatch). The library's refusals of
    // options (option_error: replay_options::validate, check_host_memory, compute_context_sizes)
    // come out as usage_errors in these flags (flags_of_fields).
    int run(std::ostream & term);
    // The flag of each library field the replay's option_errors may name.
    static const flag_names & flags_of_fields();

private:
    int run_checked(std::ostream & term);
};

}  // namespace kvsim
