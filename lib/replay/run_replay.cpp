#include "replay/run_replay.h"

#include "replay/op_replay.h"
#include "replay/op_runner.h"
#include "replay/replay_hooks.h"
#include "report/cell_map_sampler.h"
#include "report/html_report.h"
#include "report/occupancy.h"
#include "report/trace_events.h"
#include "report/requests_report.h"
#include "sched/server_sim.h"
#include "trace/text_lines.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/progress.h"
#include "util/nvtx.h"

#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

namespace kvsim {

namespace {
using json = nlohmann::json;

// The files a replay writes into --out. Each run removes those it did not write itself (see
// outputs::remove_stale), so the directory never mixes two runs; other names are never touched.
const char * const k_out_files[] = {"occupancy.csv", "requests.csv", "summary.json", "bandwidth.csv", "report.html"};

// Every output must be a distinct path that is not a directory: checked before any work, so a
// bad path fails in a second rather than after the replay (and two writers never share a file).
void check_paths(const replay_options & o, bool is_request_trace) {
    if (!is_request_trace && !o.emit_ops.empty()) {
        throw usage_error("--emit-ops applies to request traces (an op trace already is the op stream)");
    }
    std::vector<std::string> paths;
    for (const std::string * p : {&o.dump_cells, &o.emit_ops, &o.trace_json}) {
        if (!p->empty()) paths.push_back(*p);
    }
    if (!o.out_dir.empty()) {
        if (std::filesystem::exists(o.out_dir) && !std::filesystem::is_directory(o.out_dir)) {
            throw usage_error("--out " + o.out_dir + " exists and is not a directory");
        }
        for (const char * f : k_out_files) paths.push_back(o.out_dir + "/" + f);
    }
    // Compared as absolute, normalised paths with existing symbolic links resolved, so `x`,
    // `./x`, `d/../x` and `/abs/x` (and a link to x) are one file. weakly_canonical of a relative
    // path whose first component does not exist stays relative, hence absolute() first.
    std::vector<std::pair<std::string, std::string>> seen;   // canonical, as given
    for (const auto & p : paths) {
        std::error_code ec;
        std::filesystem::path abs = std::filesystem::absolute(p, ec);
        if (ec) abs = p;
        std::filesystem::path canon = std::filesystem::weakly_canonical(abs, ec);
        if (ec) canon = abs;
        const std::string key = canon.lexically_normal().string();
        if (std::filesystem::is_directory(p)) throw usage_error("output path " + p + " is a directory");
        for (const auto & [k, given] : seen) {
            if (k == key) {
                throw usage_error(given == p ? "output path " + p + " is given twice"
                                             : "output paths " + given + " and " + p + " are the same file (" + key + ")");
            }
        }
        seen.emplace_back(key, p);
    }
}

// Files of one replay: opened up front (so a bad path fails before the work), committed together.
struct outputs {
    std::unique_ptr<atomic_file> dump, emit, occupancy, requests, summary, bandwidth, report, timeline;
    std::string out_dir;

    outputs(const replay_options & o, bool is_request_trace, bool timed) : out_dir(o.out_dir) {
        check_paths(o, is_request_trace);
        if (!o.dump_cells.empty()) dump = std::make_unique<atomic_file>(o.dump_cells);
        if (!o.out_dir.empty()) {
            // remember the directories this run creates: a failed run removes them again (when empty)
            std::error_code ec;
            std::filesystem::path d = std::filesystem::absolute(o.out_dir, ec).lexically_normal();
            if (!d.has_filename()) d = d.parent_path();   // trailing slash
            auto missing = [](const std::filesystem::path & p) {
                std::error_code e;   // not_found sets e on some libstdc++ versions: only the status counts
                return !std::filesystem::exists(std::filesystem::symlink_status(p, e));
            };
            while (!ec && !d.empty() && d != d.parent_path() && missing(d)) {
                created_dirs.push_back(d);
                d = d.parent_path();
            }
            ec.clear();
            std::filesystem::create_directories(o.out_dir, ec);
            if (ec) {
                remove_created_dirs();
                throw std::runtime_error("cannot create output directory " + o.out_dir + ": " + ec.message());
            }
        }
        try {
            if (!o.emit_ops.empty()) emit = std::make_unique<atomic_file>(o.emit_ops);
            if (!o.trace_json.empty()) timeline = std::make_unique<atomic_file>(o.trace_json);
            if (o.out_dir.empty()) return;
            occupancy = std::make_unique<atomic_file>(o.out_dir + "/occupancy.csv");
            if (is_request_trace) requests = std::make_unique<atomic_file>(o.out_dir + "/requests.csv");
            summary = std::make_unique<atomic_file>(o.out_dir + "/summary.json");
            if (timed) bandwidth = std::make_unique<atomic_file>(o.out_dir + "/bandwidth.csv");
            report = std::make_unique<atomic_file>(o.out_dir + "/report.html");
        } catch (...) {
            discard();   // the destructor does not run for a constructor that throws
            throw;
        }
    }
    // All or nothing: every file is flushed and closed first (a write error there leaves no new
    // file in place), and only then are they all renamed.
    void commit() {
        atomic_file * const all[] = {dump.get(), emit.get(), occupancy.get(), requests.get(), summary.get(),
                                     bandwidth.get(), report.get(), timeline.get()};
        for (atomic_file * f : all) {
            if (f) f->finish();
        }
        for (atomic_file * f : all) {
            if (f) f->commit();
        }
        committed = true;
        remove_stale();
    }

    // A failed run: the temporary files go first (the atomic_file destructors), then the output
    // directories this run created, if they are still empty.
    ~outputs() {
        if (!committed) discard();
    }
    outputs(const outputs &) = delete;
    outputs & operator=(const outputs &) = delete;

private:
    std::vector<std::filesystem::path> created_dirs;   // deepest first
    bool committed = false;

    void discard() noexcept {
        for (auto * f : {&dump, &emit, &occupancy, &requests, &summary, &bandwidth, &report, &timeline}) f->reset();
        remove_created_dirs();
    }
    void remove_created_dirs() noexcept {
        for (const auto & d : created_dirs) {
            std::error_code ec;
            if (!std::filesystem::remove(d, ec)) break;   // not empty (or gone): leave it and its parents
        }
    }

    // Done after this run's files are committed, so a failed run leaves the previous run's set
    // whole: e.g. an op-trace run removes a request-trace run's requests.csv, an untimed run an
    // earlier bandwidth.csv. Only files (or links) with kvsim's own names, never directories.
    void remove_stale() const {
        if (out_dir.empty()) return;
        const std::pair<const char *, const atomic_file *> written[] = {
            {"occupancy.csv", occupancy.get()}, {"requests.csv", requests.get()}, {"summary.json", summary.get()},
            {"bandwidth.csv", bandwidth.get()}, {"report.html", report.get()}};
        static_assert(std::size(written) == std::size(k_out_files));
        for (const auto & [name, file] : written) {
            if (!file) remove_if_file(std::filesystem::path(out_dir) / name);
        }
    }
    static void remove_if_file(const std::filesystem::path & p) {
        std::error_code ec;
        const auto st = std::filesystem::symlink_status(p, ec);
        if (!std::filesystem::exists(st) || std::filesystem::is_directory(st)) return;
        if (!std::filesystem::remove(p, ec) && ec) {
            throw std::runtime_error("cannot remove " + p.string() + " (left by an earlier run): " + ec.message());
        }
    }
};

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
            {"context", {{"n_ctx", s.n_ctx}, {"n_ctx_seq", s.n_ctx_seq}, {"n_seq_max", ctx.params().n_seq_max},
                         {"n_stream", s.n_stream}, {"n_batch", s.n_batch}, {"n_ubatch", s.n_ubatch},
                         {"kv_unified", ctx.params().kv_unified}, {"swa_full", ctx.params().swa_full},
                         {"type_k", ggml_type_name(ctx.params().type_k)}, {"type_v", ggml_type_name(ctx.params().type_v)},
                         {"flash_attn", ctx.params().flash_attn}}},
            {"caches", caches},
            {"kv_bytes", {{"k", kb.k}, {"v", kb.v}, {"total", kb.total()}}}};
}

json peaks_json(const occupancy_recorder & occ) {
    return {{"used_cells", occ.peaks().used}, {"n_kv", occ.peaks().n_kv}, {"ubatches", occ.peaks().ubatches},
            {"occupancy_rows", occ.rows().size()}};
}

void print_kv(std::ostream & term, const std::vector<std::pair<std::string, std::string>> & rows) {
    size_t w = 0;
    for (const auto & r : rows) w = std::max(w, r.first.size());
    for (const auto & r : rows) term << fmt::format("  {:<{}}  {}\n", r.first, w, r.second);
}

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
void finish_hooks(replay_hooks * hooks, outputs & out, json & summary, std::vector<std::pair<std::string, std::string>> & term) {
    if (!hooks) return;
    if (out.bandwidth) write_bandwidth_csv(out.bandwidth->out(), hooks->rows());
    summary["bandwidth"] = hooks->summary();
    for (auto & r : hooks->terminal_rows()) term.push_back(r);
}

std::string mib(size_t b) { return fmt::format("{:.2f} MiB", (double) b / (1024.0 * 1024.0)); }

// The observers of a replay, in order: occupancy, cell map, timeline, then the kernel hooks.
struct replay_observers {
    observer_fanout fan;
    cell_map_sampler cell_map;
    std::unique_ptr<trace_event_recorder> timeline;

    replay_observers(occupancy_recorder & occ, replay_hooks * hooks, const uint64_t * step, const double * now,
                     bool want_report, bool want_timeline, uint64_t timeline_every)
        : cell_map(step, now) {
        fan.add(&occ);
        if (want_report) fan.add(&cell_map);
        if (want_timeline) {
            timeline = std::make_unique<trace_event_recorder>(now, timeline_every);
            fan.add(timeline.get());
        }
        if (hooks) fan.add(hooks->observer());
    }

    // report.html and the timeline, once the summary is final.
    void write(outputs & out, const json & summary, const occupancy_recorder & occ, const std::vector<request_result> * requests,
               replay_hooks * hooks) {
        KVSIM_NVTX_RANGE("report", (int64_t) occ.rows().size());
        const std::vector<bandwidth_row> * bw = hooks ? &hooks->rows() : nullptr;
        if (out.report) {
            double read_gbs = 0;
            if (summary.contains("bandwidth")) read_gbs = summary["bandwidth"]["measured_limit_gbs"].value("read", 0.0);
            write_html_report(out.report->out(), {summary, &occ.rows(), requests, bw, &cell_map, read_gbs});
        }
        if (out.timeline && timeline) timeline->write_json(out.timeline->out(), bw);
    }
};

void print_terminal(std::ostream & term, const std::string & title, const std::vector<std::pair<std::string, std::string>> & rows,
                    const replay_options & opt) {
    term << title << '\n';
    print_kv(term, rows);
    if (!opt.out_dir.empty()) term << fmt::format("  outputs in {}/\n", opt.out_dir);
}

std::string context_line(const context & ctx) {
    const auto & s = ctx.sizes();
    return fmt::format("n_ctx {}, n_ctx_seq {}, {} seq(s), {} stream(s), n_batch {}, n_ubatch {}{}", s.n_ctx, s.n_ctx_seq,
                       ctx.params().n_seq_max, s.n_stream, s.n_batch, s.n_ubatch,
                       s.swa_size ? fmt::format(", SWA cache {} cells", s.swa_size) : "");
}

// An op trace already is the op stream: there is no server, no arrivals and no simulated time, so
// the options that shape those would be silently ignored. Refused instead, before any work.
void check_op_trace_options(const replay_options & opt) {
    const auto & given = opt.request_only_given;
    if (given.empty()) return;
    throw usage_error(fmt::format("{} {} to request traces only; {} is an op trace (no server to simulate)",
                                  fmt::join(given, ", "), given.size() == 1 ? "applies" : "apply", opt.trace));
}

void replay_op_trace(const replay_options & opt, std::ostream & term, replay_hooks * hooks) {
    check_op_trace_options(opt);
    const op_trace t = read_op_trace(opt.trace);
    context ctx(opt.model, opt.ctx);
    outputs out(opt, false, hooks != nullptr);
    std::unique_ptr<cell_dumper> dump;
    if (out.dump) {
        dump = std::make_unique<cell_dumper>(out.dump->out());
        dump->config(ctx);
    }
    uint64_t step = 0;
    double no_time = 0;
    step_time_model tm{opt.device, opt.model};
    if (hooks) hooks->begin(ctx, &step, &no_time, &tm);
    occupancy_recorder occ(opt.occupancy_every ? opt.occupancy_every : 1, &step, &no_time, nullptr);
    replay_observers obs(occ, hooks, &step, nullptr, !opt.out_dir.empty(), !opt.trace_json.empty(), 1);
    progress_bar bar("replay", opt.progress);
    const auto t0 = std::chrono::steady_clock::now();
    const op_replay_result r = replay_ops(t, ctx, dump.get(), &obs.fan, [&](size_t done, size_t total) {
        step = done;
        bar.update(done, total);
    });
    bar.finish();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json j = {{"tool", "kvsim 0.1.0"}, {"kind", "op_trace"}, {"config", config_json(opt, ctx)},
              {"totals", {{"decode_calls", r.n_decode}, {"decode_ok", r.n_decode_ok}, {"decode_no_slot", r.n_no_slot},
                          {"decode_invalid", r.n_invalid}, {"seq_ops", r.n_seq_ops}, {"ubatches", r.n_ubatches},
                          {"tokens_placed", r.n_tokens_placed}}},
              {"peaks", peaks_json(occ)},
              {"wall_seconds", wall}};
    if (r.interrupted_at_line) j["interrupted"] = {{"at_line", r.interrupted_at_line}};
    std::vector<std::pair<std::string, std::string>> rows = {
        {"context", context_line(ctx)},
        {"decodes", fmt::format("{} (ok {}, no slot {}, invalid {})", r.n_decode, r.n_decode_ok, r.n_no_slot, r.n_invalid)},
        {"sequence ops", std::to_string(r.n_seq_ops)},
        {"ubatches", std::to_string(r.n_ubatches)},
        {"tokens placed", std::to_string(r.n_tokens_placed)},
        {"peak used cells / n_kv", fmt::format("{} (all streams) / {} (per stream)", occ.peaks().used, occ.peaks().n_kv)},
    };
    finish_hooks(hooks, out, j, rows);
    if (r.interrupted_at_line) rows.emplace_back("INTERRUPTED", fmt::format("stopped before line {} of {}", r.interrupted_at_line, opt.trace));
    rows.emplace_back("wall time", fmt::format("{:.3f} s", wall));
    if (out.occupancy) occ.write_csv(out.occupancy->out());
    if (out.summary) out.summary->out() << j.dump(2) << '\n';
    obs.write(out, j, occ, nullptr, hooks);
    out.commit();
    if (!opt.quiet) print_terminal(term, fmt::format("kvsim replay {} (op trace, model {})", opt.trace, ctx.model().name), rows, opt);
}

uint64_t auto_occupancy_every(const request_trace & t, const context & ctx) {
    double est = 0;
    for (const auto & r : t.requests) {
        est += (double) r.n_prompt / ctx.sizes().n_ubatch + (double) r.n_gen / std::max<uint32_t>(1, ctx.params().n_seq_max);
    }
    return std::max<uint64_t>(1, (uint64_t) (est * (double) ctx.memory().caches().size() / 20000.0));
}

// Keep a long replay's timeline loadable: about 50k decode calls recorded at most.
uint64_t occ_every_for_timeline(const request_trace & t, const context & ctx) {
    return auto_occupancy_every(t, ctx) * 20000 / 50000 + 1;
}

json request_totals_json(const request_trace & t, const server_totals & tt, const context & ctx) {
    uint64_t n_prompt = 0, n_gen = 0, swa_reused = 0;
    for (const auto & r : t.requests) {
        n_prompt += (uint64_t) r.n_prompt;
        n_gen += (uint64_t) r.n_gen;
    }
    for (const kv_cache * c : ctx.memory().caches()) swa_reused += c->stats().swa_reused;
    return {{"requests", t.requests.size()}, {"trace_prompt_tokens", n_prompt}, {"trace_gen_tokens", n_gen},
            {"steps", tt.steps}, {"decode_calls", tt.decode_calls}, {"decode_no_slot", tt.decode_no_slot},
            {"batch_halvings", tt.batch_halvings}, {"idle_slot_purges", tt.idle_slot_purges},
            {"context_exceeded_events", tt.context_exceeded}, {"context_shifts", tt.context_shifts},
            {"prefix_reuse_hits", tt.prefix_hits}, {"prefix_tokens_reused", tt.prefix_tokens_reused},
            {"prompt_tokens_decoded", tt.prompt_tokens_decoded}, {"gen_tokens_decoded", tt.gen_tokens_decoded},
            {"sim_seconds", tt.sim_seconds}, {"swa_reused_cells", swa_reused},
            {"ram_cache", {{"saves", tt.ram_saves}, {"restores", tt.ram_restores}, {"cells_restored", tt.ram_cells_restored},
                           {"evictions", tt.ram_evictions}, {"idle_slot_clears", tt.idle_slot_clears},
                           {"peak_bytes", tt.ram_peak_bytes}, {"peak_states", tt.ram_peak_states}}},
            {"context_checkpoints", {{"created", tt.checkpoints_created}, {"restored", tt.checkpoints_restored}}}};
}

std::string ram_cache_line(const replay_options & opt, const json & rc) {
    if (opt.server.cache_ram_mib == 0) return "off (--cache-ram 0)";
    return fmt::format("{} saves, {} restores ({} cells), {} idle-slot clears, peak {} states / {:.1f} MiB",
                       rc["saves"].get<uint64_t>(), rc["restores"].get<uint64_t>(), rc["cells_restored"].get<uint64_t>(),
                       rc["idle_slot_clears"].get<uint64_t>(), rc["peak_states"].get<uint64_t>(),
                       (double) rc["peak_bytes"].get<uint64_t>() / (1024.0 * 1024.0));
}

std::vector<std::pair<std::string, std::string>> request_terminal_rows(const replay_options & opt, const context & ctx,
                                                                      const json & totals, const json & lat,
                                                                      const occupancy_recorder & occ) {
    const auto & oc = lat["outcomes"];
    const auto & ttft = lat["ttft_s"];
    return {
        {"context", context_line(ctx)},
        {"KV memory", mib(compute_kv_bytes(ctx.model(), ctx.params(), ctx.sizes()).total())},
        {"outcomes", fmt::format("{} done, {} truncated, {} failed", oc["done"].get<uint64_t>(), oc["truncated"].get<uint64_t>(),
                                 oc["failed"].get<uint64_t>())},
        {"tokens decoded", fmt::format("{} prompt + {} generated", totals["prompt_tokens_decoded"].get<uint64_t>(),
                                       totals["gen_tokens_decoded"].get<uint64_t>())},
        {"steps / decode calls", fmt::format("{} / {} ({} no-slot returns, {} halvings, {} idle purges)",
                                             totals["steps"].get<uint64_t>(), totals["decode_calls"].get<uint64_t>(),
                                             totals["decode_no_slot"].get<uint64_t>(), totals["batch_halvings"].get<uint64_t>(),
                                             totals["idle_slot_purges"].get<uint64_t>())},
        {"context shifts", std::to_string(totals["context_shifts"].get<uint64_t>())},
        {"prefix reuse", fmt::format("{} hits, {} tokens", totals["prefix_reuse_hits"].get<uint64_t>(),
                                     totals["prefix_tokens_reused"].get<uint64_t>())},
        {"RAM prompt cache", ram_cache_line(opt, totals["ram_cache"])},
        {"context checkpoints", opt.model.has_swa() && !opt.ctx.swa_full && opt.server.n_ctx_checkpoints > 0
                                    ? fmt::format("{} created, {} restored", totals["context_checkpoints"]["created"].get<uint64_t>(),
                                                  totals["context_checkpoints"]["restored"].get<uint64_t>())
                                    : std::string("none (no sliding-window layers, --swa-full or --ctx-checkpoints 0)")},
        {"peak used cells / n_kv", fmt::format("{} (all streams) / {} (per stream)", occ.peaks().used, occ.peaks().n_kv)},
        {"SWA-reused cells", std::to_string(totals["swa_reused_cells"].get<uint64_t>())},
        {"simulated time", fmt::format("{:.2f} s ({})", totals["sim_seconds"].get<double>(), opt.device.name)},
        {"TTFT p50 / p99", ttft.value("n", 0) ? fmt::format("{:.3f} / {:.3f} s", ttft["p50"].get<double>(), ttft["p99"].get<double>())
                                               : std::string("-")},
    };
}

void replay_request_trace(const replay_options & opt, std::ostream & term, replay_hooks * hooks) {
    std::optional<request_format> fmt_opt;
    if (opt.format != "auto") fmt_opt = parse_request_format(opt.format);
    request_trace t = read_request_trace(opt.trace, fmt_opt);
    if (opt.limit && t.requests.size() > opt.limit) t.requests.resize(opt.limit);
    context ctx(opt.model, opt.ctx);
    outputs out(opt, true, hooks != nullptr);
    std::unique_ptr<cell_dumper> dump;
    if (out.dump) {
        dump = std::make_unique<cell_dumper>(out.dump->out());
        dump->config(ctx);
    }
    op_trace emitted;
    emitted.path = opt.emit_ops;
    step_time_model tm{opt.device, opt.model};
    op_runner run(ctx, dump.get(), out.emit ? &emitted : nullptr, nullptr);
    server_sim sim(run, opt.server, tm);
    if (hooks) hooks->begin(ctx, &sim.clock().step, &sim.clock().now, &tm);
    occupancy_recorder occ(opt.occupancy_every ? opt.occupancy_every : auto_occupancy_every(t, ctx), &sim.clock().step,
                           &sim.clock().now, &sim.totals().decode_no_slot);
    const uint64_t timeline_every = std::max<uint64_t>(1, occ_every_for_timeline(t, ctx));
    replay_observers obs(occ, hooks, &sim.clock().step, &sim.clock().now, !opt.out_dir.empty(), !opt.trace_json.empty(),
                         timeline_every);
    run.set_observer(&obs.fan);
    progress_bar bar("replay", opt.progress);
    const auto t0 = std::chrono::steady_clock::now();
    sim.run(t, [&](size_t done, size_t total) {
        if (obs.timeline) obs.timeline->step_done();
        bar.update(done, total);
    });
    bar.finish();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const json lat = latency_summary(sim.results());
    const json totals = request_totals_json(t, sim.totals(), ctx);
    const server_totals & tt = sim.totals();
    json j = {{"tool", "kvsim 0.1.0"},
              {"kind", "request_trace"},
              {"format", request_format_name(t.format)},
              {"config", config_json(opt, ctx)},
              {"server", {{"arrivals", opt.server.arrivals == arrival_mode::trace ? "trace" : "saturate"},
                          {"context_shift", opt.server.context_shift}, {"n_keep", opt.server.n_keep},
                          {"cache_prompt", opt.server.cache_prompt}, {"cache_ram_mib", opt.server.cache_ram_mib},
                          {"cache_idle_slots", opt.server.cache_idle_slots && opt.server.cache_ram_mib != 0}, {"n_ctx_checkpoints", opt.server.n_ctx_checkpoints},
                          {"checkpoint_min_step", opt.server.checkpoint_min_step},
                          {"slot_prompt_similarity", std::stod(fmt::format("{}", opt.server.slot_prompt_similarity))},
                          {"n_ctx_slot", sim.n_ctx_slot()}}},
              {"step_time_model", tm.describe()},
              {"totals", totals},
              {"latency", lat},
              {"peaks", peaks_json(occ)},
              {"wall_seconds", wall},
              {"bookkeeping_tokens_per_second", wall > 0 ? (double) (tt.prompt_tokens_decoded + tt.gen_tokens_decoded) / wall : 0}};
    if (tt.interrupted) j["interrupted"] = {{"at_step", tt.steps}, {"sim_seconds", tt.sim_seconds}};
    auto rows = request_terminal_rows(opt, ctx, totals, lat, occ);
    finish_hooks(hooks, out, j, rows);
    if (tt.interrupted) {
        rows.emplace_back("INTERRUPTED", fmt::format("stopped after step {} (simulated {:.2f} s); unfinished requests are 'pending'",
                                                     tt.steps, tt.sim_seconds));
    }
    rows.emplace_back("wall time", fmt::format("{:.2f} s", wall));
    if (out.emit) write_op_trace(out.emit->out(), emitted);
    if (out.occupancy) occ.write_csv(out.occupancy->out());
    if (out.requests) write_requests_csv(out.requests->out(), sim.results());
    if (out.summary) out.summary->out() << j.dump(2) << '\n';
    obs.write(out, j, occ, &sim.results(), hooks);
    out.commit();
    if (!opt.quiet) {
        print_terminal(term, fmt::format("kvsim replay {} ({} trace, {} requests, model {})", opt.trace,
                                         request_format_name(t.format), t.requests.size(), ctx.model().name),
                       rows, opt);
    }
}
}  // namespace

namespace {
bool is_op_trace(const replay_options & opt) {
    if (opt.format != "auto") return opt.format == "ops";
    return looks_like_op_trace(read_first_line(opt.trace));
}
}  // namespace

void resolve_auto_sizes(replay_options & opt) {
    if (opt.ctx.n_ctx == 0) opt.ctx.n_ctx = opt.model.n_ctx_train;
    if (!opt.n_parallel_auto) return;
    opt.n_parallel_auto = false;
    if (is_op_trace(opt)) {
        opt.ctx.n_seq_max = 1;
    } else {
        if (opt.no_kv_unified_given) {
            throw usage_error("-no-kvu: with -np auto llama-server always runs 4 slots in a unified cache; give -np N to choose");
        }
        opt.ctx.n_seq_max = 4;
        opt.ctx.kv_unified = true;
    }
}

void run_replay(const replay_options & options, std::ostream & term, replay_hooks * hooks) {
    replay_options opt = options;
    resolve_auto_sizes(opt);
    if (is_op_trace(opt)) {
        replay_op_trace(opt, term, hooks);
    } else {
        replay_request_trace(opt, term, hooks);
    }
}

}  // namespace kvsim
