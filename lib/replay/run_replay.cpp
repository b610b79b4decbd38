// The replay skeleton: what an op-trace and a request-trace replay share, in order, around the
// driver (replay_driver.h) that supplies what differs.
#include "replay/run_replay.h"

#include "replay/replay_driver.h"
#include "replay/replay_observers.h"
#include "replay/replay_outputs.h"
#include "replay/server_sizing.h"
#include "report/dump_cells.h"
#include "report/occupancy.h"
#include "time/weight_types.h"
#include "trace/op_trace.h"
#include "trace/text_lines.h"
#include "core/errors.h"
#include "util/progress.h"

#include <chrono>
#include <fmt/format.h>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>

namespace kvsim {

std::string context_line(const context & ctx) {
    const auto & s = ctx.sizes();
    return fmt::format("n_ctx {}, n_ctx_seq {}, {} seq(s), {} stream(s), n_batch {}, n_ubatch {}{}", s.n_ctx, s.n_ctx_seq,
                       ctx.params().n_seq_max, s.n_stream, s.n_batch, s.n_ubatch,
                       s.swa_size ? fmt::format(", SWA cache {} cells", s.swa_size) : "");
}

memory_breakdown replay_memory(const replay_options & opt, const context_params & p, const context_sizes & s, bool request_trace) {
    const weight_file_type & wt = opt.weights ? *opt.weights : parse_weight_file_type("f16");
    memory_breakdown b = compute_memory_breakdown(opt.model, p, s, model_weight_bytes(opt.model, wt).file_bytes(),
                                                  request_trace ? opt.server.cache_ram_mib : 0);
    if (request_trace && opt.draft_model) {
        // -md: llama-server fits the draft model and its context (the target's parameters, the draft's K/V types)
        // together with the target (common_init_result: common_fit_extra_model), whether or not it speculates
        context_params pd = p;
        pd.type_k = opt.type_k_draft;
        pd.type_v = opt.type_v_draft;
        const memory_breakdown d = compute_memory_breakdown(*opt.draft_model, pd, compute_context_sizes(*opt.draft_model, pd),
                                                            model_weight_bytes(*opt.draft_model, wt).file_bytes(), 0);
        b.model += d.model;
        b.context += d.context;
        b.compute += d.compute;
    }
    return b;
}

std::string memory_line(const memory_breakdown & b) {
    const double gib = 1024.0 * 1024.0 * 1024.0, mib = 1024.0 * 1024.0;
    const std::string compute = b.compute ? fmt::format("{:.2f}", (double) b.compute / gib) : "? (shape without n_embd)";
    const std::string ram = b.cache_ram < 0    ? "no limit"
                            : b.cache_ram == 0 ? "off"
                                               : fmt::format("up to {:.0f} MiB", (double) b.cache_ram / mib);
    return fmt::format("device {:.2f} GiB = weights {:.2f} + K/V {:.2f} + compute {}; host: logits {:.2f} MiB, "
                       "RAM prompt cache {}",
                       (double) b.device() / gib, (double) b.model / gib, (double) b.context / gib, compute,
                       (double) b.output / mib, ram);
}

nlohmann::json memory_json(const memory_breakdown & b) {
    return {{"device_bytes", b.device()}, {"model_bytes", b.model}, {"context_bytes", b.context},
            {"compute_bytes", b.compute}, {"output_bytes", b.output}, {"cache_ram_bytes", b.cache_ram}};
}

namespace {
using json = nlohmann::json;

// summary.json's "config": the trace, the model shape, the context's sizes and its caches.
// The context's resolved RoPE cparams (model/rope_scaling.h), and the training context the model has once the context
// exists (custom YaRN scaling raises it).
json rope_json(const model_shape & m, const rope_scaling & r) {
    const rope_cparams c = resolve_rope(m, r);
    return {{"scaling", rope_scaling_name(c.type)}, {"freq_base", c.freq_base}, {"freq_scale", c.freq_scale}, {"n_ctx_orig_yarn", c.n_ctx_orig_yarn},
            {"ext_factor", c.ext_factor}, {"attn_factor", c.attn_factor}, {"n_ctx_train", n_ctx_train_after_init(m, r)}};
}

json config_json(const replay_options & o, const context & ctx) {
    const auto & s = ctx.sizes();
    const auto & m = ctx.model();
    const kv_memory_bytes kb = compute_kv_bytes(m, ctx.params(), s);
    json caches = json::array();
    for (const kv_cache * c : ctx.memory().caches()) {
        caches.push_back({{"name", c->name()}, {"n_stream", c->get_n_stream()}, {"kv_size", c->get_size()},
                          {"n_swa", c->params().n_swa}, {"swa_type", swa_type_name(c->params().swa)}});
    }
    return {{"trace", o.trace},
            {"model", {{"name", m.name}, {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_head_kv", m.n_head_kv},
                       {"head_dim", m.head_dim}, {"n_swa", m.n_swa}, {"swa_type", swa_type_name(m.swa)},
                       {"swa_pattern", m.swa_pattern}, {"n_layer_swa", m.n_layer_swa()}}},
            {"context", {{"n_ctx", s.n_ctx}, {"n_ctx_origin", o.n_ctx_origin}, {"n_ctx_seq", s.n_ctx_seq}, {"n_seq_max", ctx.params().n_seq_max},
                         {"n_stream", s.n_stream}, {"n_batch", s.n_batch}, {"n_ubatch", s.n_ubatch},
                         {"kv_unified", ctx.params().kv_unified}, {"swa_full", ctx.params().swa_full},
                         {"type_k", ggml_type_name(ctx.params().type_k)}, {"type_v", ggml_type_name(ctx.params().type_v)},
                         {"flash_attn", ctx.params().flash_attn}, {"rope", rope_json(m, ctx.params().rope)}}},
            {"caches", caches},
            {"kv_bytes", {{"k", kb.k}, {"v", kb.v}, {"total", kb.total()}}}};
}

json peaks_json(const occupancy_recorder & occ) {
    return {{"used_cells", occ.peaks().used}, {"n_kv", occ.peaks().n_kv}, {"ubatches", occ.peaks().ubatches},
            {"occupancy_rows", occ.rows().size()}};
}

// bandwidth.csv: one row per timed step (columns: docs/reports.md).
void write_bandwidth_csv(std::ostream & out, const std::vector<bandwidth_row> & rows) {
    out << "step,sim_time_s,cache,n_kv,tokens,n_stream,layers_timed,kv_bytes,mask_bytes,shift_bytes,mask_ns,attn_ns,"
           "shift_ns,attn_gbs,frac_of_limit\n";
    for (const auto & r : rows) {
        out << fmt::format("{},{:.6f},{},{},{},{},{},{},{},{},{:.0f},{:.0f},{:.0f},{:.3f},{:.4f}\n", r.step, r.sim_time, r.cache,
                           r.n_kv, r.tokens, r.n_stream, r.layers_timed, r.kv_bytes, r.mask_bytes, r.shift_bytes, r.mask_ns,
                           r.attn_ns, r.shift_ns, r.attn_gbs, r.frac_of_limit);
    }
}

// Adds the kernel section to the summary and the terminal rows; writes bandwidth.csv.
void finish_hooks(replay_hooks * hooks, replay_outputs & out, json & summary, terminal_rows & term) {
    if (!hooks) return;
    if (out.bandwidth) write_bandwidth_csv(out.bandwidth->out(), hooks->rows());
    summary["bandwidth"] = hooks->summary();
    for (auto & r : hooks->terminal_rows()) term.push_back(r);
}

void print_terminal(std::ostream & term, const std::string & title, const terminal_rows & rows, const replay_options & opt) {
    term << escape_controls(title) << '\n';   // it holds the trace's file name
    size_t w = 0;
    for (const auto & r : rows) w = std::max(w, r.first.size());
    for (const auto & r : rows) term << fmt::format("  {:<{}}  {}\n", r.first, w, r.second);
    if (!opt.out_dir.empty()) term << fmt::format("  outputs in {}/\n", escape_controls(opt.out_dir));
}

// The skeleton, in order: the context, the outputs (every path checked and opened before any
// work), the cell dump, the clock and the observers, the run, the summary and terminal rows, the
// kernel hooks' part, the writes, one commit, the terminal table. `d` has read its trace already.
replay_result replay_with(const replay_options & opt, replay_driver & d, std::ostream & term, replay_hooks * hooks) {
    context ctx(opt.model, opt.ctx);
    replay_outputs out(opt, d.is_request_trace(), hooks != nullptr);
    std::unique_ptr<cell_dumper> dump;
    if (out.dump) {
        dump = std::make_unique<cell_dumper>(out.dump->out());
        dump->config(ctx);
    }
    const replay_clock clk = d.attach(ctx);
    if (hooks) hooks->begin(ctx, clk.clock, clk.feedback);
    occupancy_recorder occ(clk.occupancy_every, clk.clock, clk.no_slot);
    replay_observers obs(occ, hooks, dump.get(), clk.clock, !opt.out_dir.empty(), !opt.trace_json.empty(), clk.timeline_every);
    d.observe(obs, out);

    progress_bar bar("replay", opt.progress);
    const auto t0 = std::chrono::steady_clock::now();
    d.drive(obs, bar);
    bar.finish();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    replay_report rep = d.report(ctx, occ, wall);
    json & j = rep.summary;
    j["tool"] = "kvsim 0.1.0";
    j["config"] = config_json(opt, ctx);
    j["memory"] = memory_json(replay_memory(opt, ctx.params(), ctx.sizes(), d.is_request_trace()));
    j["peaks"] = peaks_json(occ);
    j["wall_seconds"] = wall;
    finish_hooks(hooks, out, j, rep.rows);
    if (!rep.interrupted.empty()) rep.rows.emplace_back("INTERRUPTED", rep.interrupted);
    rep.rows.emplace_back("wall time", rep.wall);

    d.write(out);
    if (out.occupancy) occ.write_csv(out.occupancy->out());
    if (out.summary) out.summary->out() << j.dump(2) << '\n';
    obs.write(out, j, occ, rep.requests, hooks);
    out.commit();
    if (!opt.quiet) print_terminal(term, rep.title, rep.rows, opt);
    return {std::move(j), rep.requests ? *rep.requests : std::vector<request_result>{}};
}

bool is_op_trace(const replay_options & opt) {
    if (opt.format != "auto") return opt.format == "ops";
    return looks_like_op_trace(read_first_line(opt.trace));
}

// The sizes a replay leaves unset, in place: a request trace as llama-server sizes them (server_sizing.h); an op
// trace drives llama_context directly: n_ctx 0 -> the model's n_ctx_train, -np auto -> 1 sequence.
void resolve_auto_sizes(replay_options & opt, bool op_trace) {
    if (!op_trace) {
        opt.n_ctx_origin = size_server_context(opt);
        return;
    }
    opt.n_ctx_origin = "-c as given";
    if (opt.ctx.n_ctx == 0) {
        opt.ctx.n_ctx = opt.model.n_ctx_train;
        opt.n_ctx_origin = fmt::format("n_ctx_train {} (-c 0 or absent on an op trace: llama_context's default)", opt.ctx.n_ctx);
    }
    if (opt.n_parallel_auto) {
        opt.n_parallel_auto = false;
        opt.ctx.n_seq_max = 1;
    }
}

replay_result run_checked(const replay_options & options, std::ostream & term, replay_hooks * hooks) {
    options.validate();
    replay_options opt = options;
    const bool op_trace = is_op_trace(opt);   // the trace's first line, read once
    resolve_auto_sizes(opt, op_trace);
    check_host_memory(opt);
    const std::unique_ptr<replay_driver> d = op_trace ? make_op_driver(opt) : make_request_driver(opt);
    return replay_with(opt, *d, term, hooks);
}
}  // namespace

void run_replay(const replay_options & options, std::ostream & term, replay_hooks * hooks) {
    run_checked(options, term, hooks);
}

replay_result run_replay_quiet(const replay_options & options) {
    replay_options opt = options;
    opt.dump_cells.clear();
    opt.out_dir.clear();
    opt.steps_csv = false;
    opt.trace_json.clear();
    opt.emit_ops.clear();
    opt.quiet = true;
    opt.progress = false;
    opt.kernels = kernel_options{};
    opt.kernels.backend = "none";
    std::ostringstream none;
    return run_checked(opt, none, nullptr);
}

}  // namespace kvsim
