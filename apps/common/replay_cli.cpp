#include "common/replay_cli.h"

#include "plan/plan_options.h"

#include "common/llama_args.h"
#include "common/cli_checks.h"

#include "replay/run_replay.h"
#include "bandwidth.h"
#include "quant.h"
#include "timing/kernel_hooks.h"
#include "core/errors.h"
#include "util/interrupt.h"
#include "util/sample_stats.h"
#include "util/timing_loop.h"
#ifdef KVSIM_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

#include <fmt/format.h>
#include <new>
#include <limits>
#include <system_error>
#include <algorithm>
#include <filesystem>
#include <thread>
#include <iostream>

namespace kvsim {

namespace {
// --backend auto: cuda if this kvsim has CUDA and a GPU is usable, else cpu.
std::string auto_backend() {
#ifdef KVSIM_HAVE_CUDA
    return cuda_device_available(nullptr) ? "cuda" : "cpu";
#else
    return "cpu";
#endif
}

// --device host: this machine's read bandwidth (kernels/bandwidth.h read probe, best of 5 passes
// over 512 MiB on the kernel threads); compute and the other terms stay the cpu profile's.
device_profile host_device(int threads) {
    const int n = threads > 0 ? threads : (int) std::max(1u, std::thread::hardware_concurrency());
    double best = 0;
    try {
        read_probe probe(size_t(512) << 20, n);
        best = summarize(sample_loop({0, 5, nullptr}, [&](int) { return probe.read_gbs(); })).max;
    } catch (const std::bad_alloc &) {   // ulimit -v, a small container: say which buffer, not "std::bad_alloc"
        throw usage_error("--device host: cannot allocate the 512 MiB buffer of the read-bandwidth probe (memory limit?); "
                          "use a shipped device, a profile file, or --bandwidth-gbs");
    } catch (const std::system_error & e) {   // std::thread: a thread limit or no memory for the stacks
        throw usage_error(fmt::format("--device host: cannot start the read-bandwidth probe's {} threads ({}); lower -t or use "
                                      "a shipped device, a profile file, or --bandwidth-gbs", n, e.what()));
    }
    device_profile d = device_preset("cpu");
    d.name = "host";
    d.source = "host";
    d.bandwidth_gbs = best;
    d.threads = n;
    return d;
}
}  // namespace

device_profile resolve_device(const std::string & name, int threads, const char * flag) {
    const auto names = device_preset_names();
    if (std::find(names.begin(), names.end(), name) != names.end()) return device_preset(name);
    if (name == "host") return host_device(threads);
    // any path that is not a directory: a pipe (`<(cat p.json)`) too; read_small_file caps a device's endless
    // content. error_code form: a symbolic-link loop is the usage error below, not a filesystem_error (exit 1).
    std::error_code ec;
    const auto st = std::filesystem::status(name, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_directory(st)) {
        device_profile d = load_device_profile(name);
        if (d.source == "datasheet") d.source = "file";
        return d;
    }
    throw usage_error(fmt::format("{} {}: neither a known device ({}), host, nor a readable profile file", flag, name,
                                  fmt::join(names, ", ")));
}

void replay_cli::add_to(CLI::App & cmd) {
    add_workload(cmd);
    add_sizing(cmd);
    add_server(cmd);
    add_fit(cmd);
    add_spec(cmd);
    add_outputs(cmd);
}

void replay_cli::add_workload(CLI::App & cmd) {
    auto & o = opt;
    cmd.add_option("trace", o.trace, "Op trace (CSV) or request trace (Azure CSV, Mooncake JSONL, BurstGPT CSV)")
        ->required();
    cmd.add_option("--format", o.format, "Trace format (default: detected from the header)")
        ->check(CLI::IsMember({"auto", "ops", "azure", "mooncake", "burstgpt"}));
    cmd.add_option("--model", model_name, "Model shape preset: " + fmt::format("{}", fmt::join(model_preset_names(), ", ")))
        ->capture_default_str();
    cmd.add_option("-b,--batch-size", o.ctx.n_batch, "Logical batch size n_batch")->capture_default_str();
    cmd.add_flag("--swa-full", o.ctx.swa_full, "Full-size SWA cache");
    cmd.add_option("--flash-attn", flash_attn, "Flash attention on|off|auto (llama.cpp -fa)")
        ->check(CLI::IsMember({"on", "off", "auto"}))
        ->capture_default_str();
    cmd.add_option("--n-layer", n_layer, "Override the preset's layer count");
    cmd.add_option("--n-head", n_head, "Override the number of query heads");
    cmd.add_option("--n-head-kv", n_head_kv, "Override the number of KV heads");
    cmd.add_option("--head-dim", head_dim, "Override the head size n_embd_head_k");
    // llama.cpp keeps n_swa as uint32_t but compares it with int32 position distances (llama_hparams::is_masked_swa):
    // a window past INT32_MAX wraps there
    cmd.add_option("--n-swa", n_swa, "Override the sliding window (tokens; 0 = no SWA)")->check(CLI::Range(0, 2147483647));
    cmd.add_option("--swa-type", swa_type_name, "Override the SWA type: none standard chunked symmetric");
    cmd.add_option("--swa-pattern", swa_pattern, "Override the SWA layer pattern (n_pattern; 0 = all layers SWA)");
    add_rope(cmd);
}

// llama.cpp's RoPE context flags (common/arg.cpp): they change no cell, position or slot cap (the slot stays capped
// at the model's training context, as llama-server caps it), only the K-shift's rotation (model/rope_scaling.h).
void replay_cli::add_rope(CLI::App & cmd) {
    auto & r = opt.ctx.rope;
    cmd.add_option("--rope-scaling", rope_scaling_name, "RoPE frequency scaling: none, linear or yarn (llama.cpp --rope-scaling; "
                   "default: the model's, linear). YaRN with a scale other than the model's raises its training context "
                   "to --yarn-orig-ctx / frequency scale, as llama.cpp does once the context exists (the slot cap, and -c "
                   "absent sizing with --fit on); every type changes the K-shift's rotation");
    cmd.add_option("--rope-scale", r.rope_scale, "RoPE context scaling factor N: frequency scale 1/N (llama.cpp --rope-scale; "
                   "0 = unset). With --rope-scaling yarn the training context becomes N x --yarn-orig-ctx");
    cmd.add_option("--rope-freq-base", r.freq_base, "RoPE base frequency (llama.cpp --rope-freq-base; 0 = the model's)");
    cmd.add_option("--rope-freq-scale", r.freq_scale, "RoPE frequency scale (llama.cpp --rope-freq-scale; 0 = the model's)");
    cmd.add_option("--yarn-orig-ctx", r.yarn_orig_ctx, "YaRN: the model's original context (llama.cpp --yarn-orig-ctx; 0 = n_ctx_train)");
    cmd.add_option("--yarn-ext-factor", r.yarn_ext_factor, "YaRN extrapolation mix factor (llama.cpp --yarn-ext-factor; < 0: 1 with yarn)");
    cmd.add_option("--yarn-attn-factor", r.yarn_attn_factor, "YaRN magnitude scaling (llama.cpp --yarn-attn-factor; < 0: 1; "
                   "replaced by llama.cpp's own value whenever the YaRN mix is on)");
    cmd.add_option("--yarn-beta-slow", r.yarn_beta_slow, "YaRN high correction dim (llama.cpp --yarn-beta-slow; < 0: 1)");
    cmd.add_option("--yarn-beta-fast", r.yarn_beta_fast, "YaRN low correction dim (llama.cpp --yarn-beta-fast; < 0: 32)");
}

void replay_cli::add_sizing(CLI::App & cmd) {
    auto & o = opt;
    o.ctx.n_ctx = 0;
    opt_ctx = cmd.add_option("-c,--ctx-size", o.ctx.n_ctx,
                             "Context size in tokens (padded to 256 like llama.cpp). Absent or 0 on a request trace: "
                             "llama-server's size, the training context x the slots, absent also shrunk by --fit to the "
                             "device's memory; 0 on an op trace: the training context. A request trace's slots get "
                             "min(n_ctx_seq, the model's training context), as in llama-server");
    cmd.add_option("--parallel", n_parallel,
                   "Server slots / n_seq_max (llama.cpp -np; -1 = auto: 4 slots with a unified cache for a request trace, "
                   "as llama-server; 1 for an op trace)")
        ->capture_default_str();
    cmd.add_option("--ubatch-size", o.ctx.n_ubatch, "Physical batch size n_ubatch (llama.cpp -ub)")->capture_default_str();
    opt_kv_unified = cmd.add_flag("--kv-unified,!--no-kv-unified", o.ctx.kv_unified,
                 "One KV stream shared by all sequences (llama.cpp -kvu / -no-kvu; on by itself when -np is auto)");
    cmd.add_option("--cache-type-k", type_k, "K cache type (llama.cpp -ctk): f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl")
        ->capture_default_str();
    cmd.add_option("--cache-type-v", type_v, "V cache type (llama.cpp -ctv)")->capture_default_str();
    request_only.push_back(cmd.add_option("--cache-ram", o.server.cache_ram_mib,
                                          "Host-RAM prompt cache in MiB (llama-server -cram; -1 = no limit, 0 = off)")
                               ->capture_default_str());
}

void replay_cli::add_server(CLI::App & cmd) {
    auto & o = opt;
    request_only.push_back(
        cmd.add_flag("--context-shift", o.server.context_shift, "Shift a full slot (seq_rm + seq_add) instead of stopping it"));
    shift_only.push_back(cmd.add_option("--keep", o.server.n_keep, "n_keep: tokens kept at a context shift (-1 = the whole prompt)")
                             ->capture_default_str());
    shift_only.push_back(
        cmd.add_option("--n-discard", o.server.n_discard, "n_discard at a context shift (0 = n_left / 2)")->capture_default_str());
    request_only.push_back(
        cmd.add_option("--arrivals", arrivals, "trace: requests arrive at their timestamps; saturate: admit as soon as a slot frees")
            ->check(CLI::IsMember({"trace", "saturate"}))
            ->capture_default_str());
    request_only.push_back(
        cmd.add_flag("--no-cache-prompt", no_cache_prompt, "Do not reuse a slot's cached prompt prefix (server cache_prompt=false)"));
    request_only.push_back(cmd.add_option("--slot-prompt-similarity", o.server.slot_prompt_similarity,
                                          "Prefer the idle slot whose cached prefix covers more than this fraction of the "
                                          "prompt (llama-server -sps; 0 = LRU only)")
                               ->capture_default_str());
    request_only.push_back(opt_idle_slots = cmd.add_flag("--cache-idle-slots,!--no-cache-idle-slots", o.server.cache_idle_slots,
                                        "Save idle slots to the RAM cache at each launch, and clear them with a unified cache "
                                        "(default: on, as llama-server; needs --cache-ram)"));
    request_only.push_back(opt_checkpoints = cmd.add_option("--ctx-checkpoints,--swa-checkpoints", o.server.n_ctx_checkpoints,
                                          "Context checkpoints per slot for SWA models (llama-server -ctxcp)")
                               ->capture_default_str());
    request_only.push_back(opt_checkpoint_step = cmd.add_option("--checkpoint-min-step", o.server.checkpoint_min_step,
                                          "Minimum spacing of context checkpoints in tokens (llama-server -cms)")
                               ->capture_default_str());
    request_only.push_back(cmd.add_option("--device", device,
                                          fmt::format("Step-time device profile: {} (fitted on published llama-bench results, or derived from "
                                                      "such a fit: `kvsim devices` lists their sources and errors), {} (datasheet "
                                                      "rooflines: upper bounds; a CPU estimate), a profile JSON file (kvsim "
                                                      "calibrate writes one), or host (this machine's measured read bandwidth)",
                                                      fmt::join(device_preset_names(true), ", "),
                                                      fmt::join(device_preset_names(false), ", ")))
                               ->capture_default_str());
    request_only.push_back(cmd.add_option("--weights", weights,
                                          "GGUF file type of the model's weights: " +
                                              fmt::format("{}", fmt::join(weight_file_type_names(), ", ")))
                               ->capture_default_str());
    request_only.push_back(cmd.add_option("--bandwidth-gbs", bandwidth_gbs, "Override the device memory bandwidth (GB/s)"));
    request_only.push_back(cmd.add_option("--tflops", peak_tflops, "Override the device peak compute (TFLOP/s)"));
    // size_t: CLI11 would take -1 as the largest count (every request) without the check
    request_only.push_back(cmd.add_option("--limit", o.limit, "Replay only the first N requests (0 = all)")->check(whole_count()));
    request_only.push_back(cmd.add_flag("--suggest-bench", o.suggest_bench,
                                        "Print the llama-bench command whose results cover the steps this replay ran (tokens per "
                                        "call, prompt chunks, depths): what kvsim calibrate needs for this workload"));
    request_only.push_back(cmd.add_option("--rate-scale", o.rate_scale,
                                          "Replay the trace's arrivals X times as fast (2 = twice the request rate, 0.5 = "
                                          "half), keeping their order and shape; with --arrivals trace")
                               ->capture_default_str());
    request_only.push_back(cmd.add_flag("--cont-batching,!--no-cont-batching", o.server.cont_batching,
                                        "Continuous batching (llama-server -cb, the default; -nocb: a prompt is processed only "
                                        "when no slot is generating)"));
    request_only.push_back(cmd.add_option("--cache-reuse", o.server.n_cache_reuse,
                                          "Minimum run of cached tokens that a new prompt reuses at another position by KV "
                                          "shifting (llama-server --cache-reuse; 0 = off; the --fim-qwen-* presets set 256). "
                                          "Needs a trace whose prompts say their content (Mooncake hash_ids); off, as in llama-server, for an SWA "
                                          "model without --swa-full")
                               ->capture_default_str());
    request_only.push_back(cmd.add_option("--predict,--n-predict", o.server.n_predict,
                                          "Generation limit of the requests that send none (llama-server -n; -1 = none). A "
                                          "request sends its trace's output length unless its Mooncake line has \"n_predict\": N "
                                          "(N >= 0: its own limit; -1: none, so -n applies); without such lines -n changes nothing "
                                          "(docs/trace-formats.md)")
                               ->capture_default_str());
    request_only.insert(request_only.end(), shift_only.begin(), shift_only.end());
}

void replay_cli::add_spec(CLI::App & cmd) {
    auto & s = opt.server.spec;
    const auto add = [&](CLI::Option * o) { request_only.push_back(o); };
    add(cmd.add_option("--model-draft,--spec-draft-model", draft_model_name,
                       "Draft model preset for speculative decoding (llama-server -md); it speculates only with --spec-type "
                       "draft-simple, as llama-server (its default type is none)"));
    add(cmd.add_option("--spec-type", spec_type, "Speculative decoding type (llama-server --spec-type): none, draft-simple "
                                                 "(the other types of llama-server are not modelled)")
            ->check(CLI::IsMember({"none", "draft-simple"}))
            ->capture_default_str());
    add(cmd.add_option("--spec-draft-n-max", s.n_max, "Tokens drafted per step (llama-server --spec-draft-n-max)")->capture_default_str());
    add(cmd.add_option("--spec-draft-n-min", s.n_min, "A shorter draft is dropped (llama-server --spec-draft-n-min)")->capture_default_str());
    add(cmd.add_option("--spec-draft-p-min", s.p_min, "Only 0 (llama-server's default) is modelled: the draft model's confidence is not")
            ->capture_default_str());
    add(cmd.add_option("--spec-synth-rates", s.synth_rates,
                       "The acceptance of drafted tokens: for each drafted position the probability that it is accepted "
                       "(unconditional, so non-increasing), --spec-draft-n-max values (llama-server's synthetic acceptance; each request's draws seeded with its trace \"seed\", "
                       "else its index)")
            ->delimiter(','));
    add(cmd.add_option("--spec-synth-len", synth_len,
                       "The acceptance as a mean accepted length per step, the target's token included (llama-server "
                       "--spec-synth-len; rates p, p^2, ... fitted to it)"));
    add(cmd.add_option("--spec-draft-type-k,--cache-type-k-draft", type_k_draft, "Draft model's K cache type (llama-server -ctkd)")
            ->capture_default_str());
    add(cmd.add_option("--spec-draft-type-v,--cache-type-v-draft", type_v_draft, "Draft model's V cache type (llama-server -ctvd)")
            ->capture_default_str());
    add(cmd.add_option("--emit-draft-ops", opt.emit_draft_ops,
                       "Speculative decoding: write the draft context's op trace (as --emit-ops does the target's; - = standard output)"));
}

void replay_cli::add_fit(CLI::App & cmd) {
    auto & o = opt;
    request_only.push_back(cmd.add_option("--fit", fit,
                                          "llama-server's --fit (-fit): with -c absent, shrink the context (training context x slots) "
                                          "until weights + K/V + compute leave --fit-target free on the device; off: the "
                                          "training context for all slots together, llama_context's default (on, off)")
                               ->check(CLI::IsMember({"on", "off"}))
                               ->capture_default_str());
    request_only.push_back(cmd.add_option("--fit-ctx", fit_ctx,
                                          "Smallest context per slot --fit may choose (-fitc; llama-server default 4096)"));
    request_only.push_back(cmd.add_option("--fit-target", fit_target_mib,
                                          "MiB --fit leaves free on the device (-fitt; llama-server default 1024)"));
    request_only.push_back(cmd.add_option("--device-memory", device_memory,
                                          "The device's memory for --fit (e.g. 24GiB; default: the --device profile's, "
                                          "unknown for cpu and host)"));
    request_only.push_back(cmd.add_option("--kv-unified-per-slot", o.server.kv_unified_per_slot,
                                          "Context cap per slot (llama-server --kv-unified-per-slot; 0 = unset); with -c "
                                          "absent the KV pool is slots x N")
                               ->capture_default_str());
}

void replay_cli::add_outputs(CLI::App & cmd) {
    auto & o = opt;
    cmd.add_option("--dump-cells", o.dump_cells, "Write every placement and cell state as JSON lines (kvoracle format; - = standard output, the summary then on standard error)")->check(non_empty_name());
    cmd.add_option("--out", o.out_dir, "Directory for reports: summary.json, occupancy.csv, requests.csv (request traces), "
                   "bandwidth.csv (timed kernels), report.html; steps.csv with --steps-csv")->check(non_empty_name());
    cmd.add_option("--trace-json", o.trace_json, "Write a Chrome trace-event / Perfetto timeline of the replay (open in ui.perfetto.dev; - = standard output)")
        ->check(non_empty_name());
    cmd.add_option("--emit-ops", o.emit_ops, "Request traces: write the op trace the scheduler generated (replayable; - = standard output, the summary then on "
                   "standard error)")->check(non_empty_name());
    // request_only / shift_only: checked in check_given_options
    request_only.push_back(cmd.add_flag("--steps-csv", o.steps_csv,
                                        "Also write steps.csv into --out: one row per llama_decode call with its predicted "
                                        "time (61 MB for the bundled Azure trace)"));
    cmd.add_option("--occupancy-every", o.occupancy_every, "occupancy.csv: one row every N ubatches (0 = auto, about 20k rows)");
    cmd.add_option("--backend", o.kernels.backend, "Attention kernels: auto (cuda if built and a GPU is present, else cpu), cpu, cuda, none")
        ->check(CLI::IsMember({"auto", "cpu", "cuda", "none"}))
        ->capture_default_str();
    cmd.add_option("-t,--threads", o.kernels.threads, "Kernel threads (0 = all cores), as llama.cpp's -t")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    cmd.add_option("--time-layers", o.kernels.time_layers, "Layers with real K/V buffers and timings; the rest scale by layer count")
        ->capture_default_str();
    cmd.add_option("--time-every", o.kernels.time_every, "Time one ubatch in N (0 = auto: every ubatch at first, sparser as the replay goes on)")
        ->capture_default_str();
    cmd.add_option("--time-budget", o.kernels.time_budget_s, "Stop timing kernels after this many seconds of kernel time (0 = no limit)")
        ->capture_default_str();
    cmd.add_flag("--verify", o.kernels.verify, "Check sampled steps against naive attention over each sequence's cells. "
                 "A K-shift's magnitude other than 1 (YaRN, --yarn-attn-factor) compounds over shifts: the reference applies "
                 "it exactly but rounds K to the cache type once, ggml after every shift, so after many shifts the "
                 "tolerance can be exceeded by a correct kernel (kshift_vs_ggml holds the K-shift bit for bit)");
    cmd.add_option("--verify-every", o.kernels.verify_every, "With --verify: verify one timed step in N (0 = all)")->capture_default_str();
    cmd.add_flag("--no-rot", o.kernels.no_rot, "No Hadamard rotation of quantized caches (LLAMA_ATTN_ROT_DISABLE)");
    request_only.push_back(
        cmd.add_option("--step-time", step_time, "Simulated step time: roofline, or measured (attention part from the timed kernels)")
            ->check(CLI::IsMember({"roofline", "measured"}))
            ->capture_default_str());
    cmd.add_flag("-q,--quiet", o.quiet, "No terminal summary");
    cmd.add_flag("--no-progress", no_progress, "Never draw a progress bar");
    cmd.add_flag("--progress", force_progress, "Draw a progress bar even when stderr is not a terminal");
}

// --fit's fields. -c 0 sets the fit's smallest context to UINT32_MAX upstream (common/arg.cpp: "disable context
// reduction ... if the user explicitly requests the full context size"); an explicit -fitc wins here whatever the order.
void replay_cli::finish_fit(replay_options & o) const {
    o.fit.enabled = fit == "on";
    if (fit_ctx) {
        o.fit.n_ctx_min = *fit_ctx;
    } else if (opt_ctx && opt_ctx->count() > 0 && o.ctx.n_ctx == 0) {
        o.fit.n_ctx_min = std::numeric_limits<uint32_t>::max();
    }
    if (fit_target_mib) {
        if (*fit_target_mib < 0 || *fit_target_mib > (int64_t(1) << 40)) {
            throw usage_error(fmt::format("--fit-target must be 0 to 2^40 MiB, got {}", *fit_target_mib));
        }
        o.fit.margin = *fit_target_mib << 20;
    }
    if (device_memory) {
        try {
            o.device_memory = parse_memory_bytes(*device_memory);
        } catch (const std::invalid_argument & e) {
            throw usage_error(std::string("--device-memory: ") + e.what());
        }
    }
}

replay_options replay_cli::finish() {
    replay_options o = opt;
    try {
        o.model = model_preset(model_name);
        // the flag in front: -ctk and -ctkd say the same words
        const auto type_of = [](const char * flag, const std::string & v) {
            try {
                return parse_ggml_type(v);
            } catch (const std::invalid_argument & e) {
                throw std::invalid_argument(std::string(flag) + ": " + e.what());
            }
        };
        o.ctx.type_k = type_of("-ctk", type_k);
        o.ctx.type_v = type_of("-ctv", type_v);
        if (!swa_type_name.empty()) o.model.swa = parse_swa_type(swa_type_name);
        if (!rope_scaling_name.empty()) o.ctx.rope.type = parse_rope_scaling(rope_scaling_name);
        if (!draft_model_name.empty()) o.draft_model = model_preset(draft_model_name);
        o.type_k_draft = type_of("-ctkd", type_k_draft);
        o.type_v_draft = type_of("-ctvd", type_v_draft);
    } catch (const std::invalid_argument & e) {
        throw usage_error(e.what());
    }
    if (n_layer) o.model.n_layer = *n_layer;
    if (n_head) o.model.n_head = *n_head;
    if (n_head_kv) o.model.n_head_kv = *n_head_kv;
    if (head_dim) o.model.head_dim = *head_dim;
    if (swa_pattern) o.model.swa_pattern = *swa_pattern;
    if (n_swa) {
        o.model.n_swa = *n_swa;
        if (*n_swa > 0 && o.model.swa == swa_type::none && swa_type_name.empty()) o.model.swa = swa_type::standard;
        if (*n_swa == 0) o.model.swa = swa_type::none;
    }
    o.ctx.flash_attn = flash_attn != "off";
    o.server.arrivals = arrivals == "saturate" ? arrival_mode::saturate : arrival_mode::trace;
    o.server.cache_prompt = !no_cache_prompt;
    o.server.spec.draft_simple = spec_type == "draft-simple";
    o.server.spec.has_draft_model = o.draft_model.has_value();
    if (synth_len) {
        // upstream's parser refuses -1 too: it is the value that means "unset"
        if (*synth_len == -1.0) throw usage_error("--spec-synth-len -1: invalid value (llama-server refuses it: -1 means unset)");
        o.server.spec.synth_len = *synth_len;
    }
    if (n_parallel == 0 || n_parallel < -1) throw usage_error(fmt::format("--parallel must be -1 (auto) or >= 1, got {}", n_parallel));
    if (n_parallel > 0) o.ctx.n_seq_max = (uint32_t) n_parallel;
    o.n_parallel_auto = n_parallel < 0;
    o.device = resolve_device(device, o.kernels.threads);
    try {
        o.weights = &parse_weight_file_type(weights);
    } catch (const std::invalid_argument & e) {
        throw usage_error(std::string("--weights: ") + e.what());
    }
    o.kernels.measured_step_time = step_time == "measured";
    if (bandwidth_gbs) o.device.bandwidth_gbs = *bandwidth_gbs;
    if (peak_tflops) o.device.peak_tflops = *peak_tflops;
    // the profile's provenance no longer covers the numbers: say so wherever the source is printed
    if (bandwidth_gbs || peak_tflops) {
        o.device.overridden = true;
        o.device.source += fmt::format(", overridden:{}{}", bandwidth_gbs ? fmt::format(" --bandwidth-gbs {:g}", *bandwidth_gbs) : "",
                                       peak_tflops ? fmt::format(" --tflops {:g}", *peak_tflops) : "");
    }
    if (no_progress) o.progress = false;
    if (force_progress) o.progress = true;
    // auto resolved here, so that the options' checks (--step-time measured needs --device host on the CPU) see it
    if (o.kernels.backend == "auto") o.kernels.backend = auto_backend();
    finish_fit(o);
    check_given_options(o);
    return o;
}

// An option that would change nothing is refused rather than silently ignored, so a user never
// reads results believing a knob was in effect. Only options given on the command line count
// (count() > 0): their defaults are always "set".
void replay_cli::check_given_options(replay_options & o) const {
    if (!o.server.context_shift) {
        for (const CLI::Option * op : shift_only) {
            if (op->count() > 0) throw usage_error(op->get_name() + " only applies with --context-shift (it shapes the shift)");
        }
    }
    if (opt_idle_slots->count() > 0 && o.server.cache_idle_slots && o.server.cache_ram_mib == 0) {
        throw usage_error("--cache-idle-slots saves idle slots to the RAM prompt cache, which --cache-ram 0 turns off");
    }
    if ((opt_checkpoints->count() > 0 || opt_checkpoint_step->count() > 0) && (!o.model.has_swa() || o.ctx.swa_full)) {
        throw usage_error(fmt::format("{}: llama-server makes context checkpoints only for a model with sliding-window layers "
                                      "and without --swa-full ({}{})", opt_checkpoints->count() > 0 ? "--ctx-checkpoints" : "--checkpoint-min-step",
                                      o.model.name, o.ctx.swa_full ? " with --swa-full" : " has none"));
    }
    o.no_kv_unified_given = opt_kv_unified && opt_kv_unified->count() > 0 && !o.ctx.kv_unified;
    // The trace kind is known only once run_replay has looked at the file: it refuses these there.
    for (const CLI::Option * op : request_only) {
        if (op->count() > 0) o.request_only_given.push_back(op->get_name());
    }
}

namespace {
std::unique_ptr<replay_hooks> make_hooks(const kernel_options & k) {
    std::string backend = k.backend == "auto" ? auto_backend() : k.backend;
#ifdef KVSIM_HAVE_CUDA
    if (backend == "cuda") {
        std::string why;
        if (!cuda_device_available(&why)) throw usage_error("--backend cuda: " + why);
        // the GPU's memory limit: device-to-device copy bandwidth (issue 8's reference), not the host's DRAM
        limit_probe probe{[] { return cuda_copy_bandwidth(size_t(1) << 30, 10); }, "device-to-device copy"};
        // asynchronous calls timed with CUDA events (L2 flushed before each), the mask updated in place
        return make_kernel_hooks(k, make_cuda_backend(0, false), std::move(probe), kernel_drive{cuda_event_timer(true), true});
    }
#else
    if (backend == "cuda") throw usage_error("--backend cuda: this kvsim was built without CUDA (nvcc not found at build time)");
#endif
    if (backend == "none") return nullptr;
    return make_cpu_kernel_hooks(k);
}

// The kernels handle f32, f16, q8_0 and q4_0 K/V; other cache types replay bookkeeping only.
void check_kernel_types(const replay_options & o) {
    if (o.kernels.backend == "none") return;
    // the attention kernels work on 32-wide head-dimension blocks (kernels/attention.cpp check_fa);
    // refused here, before any output exists, rather than at the first timed step
    if (o.model.head_dim % 32 != 0) {
        throw usage_error(fmt::format("--head-dim {}: the attention kernels need a head size that is a multiple of 32; "
                                      "use --backend none to replay the bookkeeping only", o.model.head_dim));
    }
    for (ggml_type t : {o.ctx.type_k, o.ctx.type_v}) {
        if (!kernel_supports_type(t)) {
            throw usage_error(fmt::format("the attention kernels do not support cache type {} (f32, f16, q8_0, q4_0); "
                                          "use --backend none to replay the bookkeeping only", ggml_type_name(t)));
        }
    }
}
}  // namespace

const flag_names & replay_cli::flags_of_fields() {
    static const flag_names flags = {
        // context_params, model_shape
        {"n_ctx", "-c"}, {"n_seq_max", "-np"}, {"n_batch", "-b"}, {"n_ubatch", "-ub"}, {"flash_attn", "-fa"},
        {"swa_full", "--swa-full"}, {"n_layer", "--n-layer"}, {"n_head", "--n-head"}, {"n_head_kv", "--n-head-kv"},
        {"head_dim", "--head-dim"}, {"n_swa", "--n-swa"}, {"swa_type", "--swa-type"},
        // server_params
        {"n_keep", "--keep"}, {"n_discard", "--n-discard"}, {"slot_prompt_similarity", "--slot-prompt-similarity"},
        {"cache_ram_mib", "--cache-ram"}, {"n_ctx_checkpoints", "--ctx-checkpoints"},
        {"checkpoint_min_step", "--checkpoint-min-step"},
        // device_profile, kernel_options
        {"bandwidth_gbs", "--bandwidth-gbs"}, {"peak_tflops", "--tflops"}, {"backend", "--backend"},
        {"verify", "--verify"}, {"measured_step_time", "--step-time measured"}, {"time_budget_s", "--time-budget"},
        {"time_layers", "--time-layers"}, {"rate_scale", "--rate-scale"}, {"fit_ctx", "--fit-ctx"},
        {"fit_target", "--fit-target"}, {"device_memory", "--device-memory"}, {"device", "--device"}, {"kv_unified_per_slot", "--kv-unified-per-slot"},
        {"n_cache_reuse", "--cache-reuse"}, {"n_predict", "-n"},
        // spec_params
        {"spec_type", "--spec-type"}, {"model_draft", "-md"}, {"spec_draft_n_max", "--spec-draft-n-max"},
        {"spec_draft_p_min", "--spec-draft-p-min"}, {"spec_synth_rates", "--spec-synth-rates"},
        {"spec_synth_len", "--spec-synth-len"}, {"type_k_draft", "-ctkd"}, {"type_v_draft", "-ctvd"},
        // rope_scaling
        {"rope_scaling", "--rope-scaling"}, {"rope_scale", "--rope-scale"}, {"rope_freq_base", "--rope-freq-base"},
        {"rope_freq_scale", "--rope-freq-scale"}, {"yarn_orig_ctx", "--yarn-orig-ctx"}, {"yarn_ext_factor", "--yarn-ext-factor"},
        {"yarn_attn_factor", "--yarn-attn-factor"}, {"yarn_beta_fast", "--yarn-beta-fast"},
        {"yarn_beta_slow", "--yarn-beta-slow"},
    };
    return flags;
}

int replay_cli::run(std::ostream & term) {
    try {
        return run_checked(term);
    } catch (const option_error & e) {
        throw said_in_flags(e, flags_of_fields());
    }
}

int replay_cli::run_checked(std::ostream & term) {
    replay_options o = finish();
    // a file output named `-` goes to standard output, and the terminal summary to standard error, so that the pipe
    // gets the file alone (as calibrate -o -)
    bool file_on_stdout = false;
    for (std::string * p : {&o.dump_cells, &o.emit_ops, &o.emit_draft_ops, &o.trace_json}) file_on_stdout |= dash_is_stdout(*p);
    std::ostream & summary = file_on_stdout ? std::cerr : term;
    check_kernel_types(o);
    auto hooks = make_hooks(o.kernels);
    install_interrupt_handler();
    run_replay(o, summary, hooks.get());
    if (interrupted()) {
        std::cerr << "kvsim: interrupted; the outputs hold what finished\n";
        return 128 + interrupt_signal();
    }
    if (hooks && hooks->verify_failures() > 0) {
        std::cerr << "kvsim: --verify found " << hooks->verify_failures() << " mismatches (see summary.json: bandwidth.verify)\n";
        return EXIT_FAILURE_INTERNAL;
    }
    return EXIT_OK;
}

}  // namespace kvsim
