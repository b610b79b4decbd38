// Everything `kvsim replay` can be told; filled by apps/kvsim.cpp, consumed by run_replay.
#pragma once

#include "kv/context.h"
#include "kv/fit.h"
#include "model/model.h"
#include "sched/server_sim.h"
#include "time/step_time.h"

#include <optional>
#include <string>
#include <vector>

namespace kvsim {

// How the real kernels run during a replay (consumed by kernels/replay via replay_hooks).
struct kernel_options {
    std::string backend = "auto";   // auto | cpu | cuda | none (bookkeeping only)
    int threads = 0;                // 0 = all cores
    uint32_t time_layers = 1;       // layers with real K/V buffers; others scale by layer count
    uint64_t time_every = 0;        // time one ubatch in N; 0 = auto (budget-driven)
    double time_budget_s = 20.0;    // stop timing once the kernels used this much wall time
    bool verify = false;            // compare with naive attention over each sequence's logical tokens
    uint64_t verify_every = 0;      // verify one timed step in N; 0 = every timed step
    bool no_rot = false;            // LLAMA_ATTN_ROT_DISABLE: no Hadamard rotation for quantized caches
    bool measured_step_time = false;   // replace the roofline's attention part with measured times
};

struct replay_options {
    std::string trace;                  // op trace (CSV) or request trace (Azure/Mooncake/BurstGPT)
    std::string format = "auto";        // auto | ops | azure | mooncake | burstgpt
    model_shape model = model_preset("llama-3-8b");
    context_params ctx;                 // n_ctx 0 = unset: sized as llama-server does (replay/server_sizing.h)
    fit_params fit;                     // request traces: llama-server's --fit, -fitc (UINT32_MAX: -c 0), -fitt
    int64_t device_memory = -1;         // --device-memory bytes for --fit; -1 = the device profile's memory_mib
    std::string n_ctx_origin;           // set by run_replay's sizing: how n_ctx was chosen (summary.json, terminal)
    std::string memory_warning;         // set by the sizing: the context does not fit the device's memory ("" = fits or unknown)
    bool n_parallel_auto = false;
    bool no_kv_unified_given = false;   // -no-kvu on the command line (refused with -np auto on a request trace)       // -np absent / -1: 4 slots + unified cache (request traces), 1 (op traces)
    std::string dump_cells;             // kvoracle-format JSON lines, "" = none
    std::string out_dir;                // reports (summary.json, occupancy.csv, report.html, ...), "" = none
    bool steps_csv = false;             // request traces: also steps.csv in out_dir (one row per llama_decode call)
    bool suggest_bench = false;         // request traces: print the llama-bench command covering the replay's steps
    std::string trace_json;             // Chrome trace-event / Perfetto timeline, "" = none
    std::string emit_ops;               // request traces: write the generated op trace here
    std::string emit_draft_ops;         // speculative decoding: the draft context's op trace
    std::optional<model_shape> draft_model;   // -md: the draft model's preset (server.spec.has_draft_model mirrors it)
    ggml_type type_k_draft = ggml_type::f16;  // -ctkd / --spec-draft-type-k
    ggml_type type_v_draft = ggml_type::f16;  // -ctvd / --spec-draft-type-v
    server_params server;               // request traces: llama-server behaviour
    device_profile device = device_preset("h200");   // step-time device profile (--device)
    const weight_file_type * weights = nullptr;      // --weights: GGUF file type of the model; nullptr = f16
    uint64_t occupancy_every = 0;       // occupancy.csv row every N ubatches; 0 = auto
    size_t limit = 0;                   // replay only the first N requests (0 = all)
    double rate_scale = 1.0;            // request traces: arrivals at arrival_s / rate_scale (trace/request_trace.h)
    kernel_options kernels;
    bool quiet = false;                 // no terminal summary
    std::optional<bool> progress;       // unset = only when stderr is a terminal
    // Request-trace options the user gave explicitly (--arrivals, --context-shift, --device, ...),
    // by name: an op trace has no server to simulate, so run_replay refuses them there.
    std::vector<std::string> request_only_given;

    // Throws option_error (core/errors.h), naming the fields, for options no replay can run with: the
    // model shape (a dimension 0, n_head not a multiple of n_head_kv, swa_full without SWA layers, an SWA
    // type without n_swa), n_ubatch > n_batch, server.validate()'s, a device bandwidth or peak outside the
    // profile range, kernel options (time_layers 0 or above n_layer, a negative or infinite time budget,
    // verify or a measured step time without a backend). run_replay calls it first.
    void validate() const;
};

// The one host-memory rule (util/host_memory.h) for a replay with resolved sizes (n_ctx, n_seq_max):
// cell metadata of every cell, plus the timed layers' K/V buffers unless backend is none. Throws
// option_error naming the fields that lower it; nothing when the machine's memory is unknown.
void check_host_memory(const replay_options & o);

// Exit statuses of the CLIs.
enum exit_status : int { EXIT_OK = 0, EXIT_FAILURE_INTERNAL = 1, EXIT_BAD_INPUT = 2, EXIT_INTERRUPTED = 130 };

}  // namespace kvsim
