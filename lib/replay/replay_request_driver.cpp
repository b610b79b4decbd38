// The request-trace driver of the replay skeleton: llama-server's slot loop (server_sim) over the
// trace's requests, every cache call through the op door; adds requests.csv, steps.csv (one row
// per decode call) and --emit-ops (the op trace the server produced).
#include "replay/replay_driver.h"

#include "drive/op_runner.h"
#include "report/requests_report.h"
#include "report/steps.h"
#include "time/bench_coverage.h"
#include "time/device_profile.h"
#include "sched/server_sim.h"
#include "trace/op_trace.h"
#include "trace/request_trace.h"
#include "core/errors.h"

#include <algorithm>
#include <fmt/format.h>
#include <optional>

namespace kvsim {

namespace {
using json = nlohmann::json;

// About 20k occupancy rows for the whole trace, estimated from its prompt and generated tokens.
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

// summary.json's "totals" of a request trace.
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
            {"cache_reuse", {{"chunks", tt.cache_reuse_chunks}, {"tokens", tt.cache_reuse_tokens}}},
            {"prompt_tokens_decoded", tt.prompt_tokens_decoded}, {"gen_tokens_decoded", tt.gen_tokens_decoded},
            {"sim_seconds", tt.sim_seconds}, {"swa_reused_cells", swa_reused},
            {"ram_cache", {{"saves", tt.ram_saves}, {"restores", tt.ram_restores}, {"cells_restored", tt.ram_cells_restored},
                           {"evictions", tt.ram_evictions}, {"idle_slot_clears", tt.idle_slot_clears},
                           {"peak_bytes", tt.ram_peak_bytes}, {"peak_states", tt.ram_peak_states}}},
            {"context_checkpoints", {{"created", tt.checkpoints_created}, {"restored", tt.checkpoints_restored}}}};
}

// summary.json's "server": the llama-server options the run used, as server_sim applied them (--context-shift and
// --cache-idle-slots may be turned off the way the real server turns them off).
json server_json(const server_sim & sim) {
    const server_params & s = sim.params();
    return {{"arrivals", s.arrivals == arrival_mode::trace ? "trace" : "saturate"},
            {"context_shift", s.context_shift}, {"context_shift_refused", sim.context_shift_refused()},
            {"n_keep", s.n_keep}, {"cont_batching", s.cont_batching},
            {"n_cache_reuse", s.n_cache_reuse}, {"cache_reuse_refused", sim.cache_reuse_refused()}, {"n_predict", s.n_predict},
            {"cache_prompt", s.cache_prompt}, {"cache_ram_mib", s.cache_ram_mib},
            {"cache_idle_slots", s.cache_idle_slots}, {"n_ctx_checkpoints", s.n_ctx_checkpoints},
            {"checkpoint_min_step", s.checkpoint_min_step},
            {"slot_prompt_similarity", std::stod(fmt::format("{}", s.slot_prompt_similarity))},
            {"n_ctx_slot", sim.n_ctx_slot()}};
}

// summary.json's "weights": the GGUF file type the step-time model reads per ubatch.
json weights_json(const step_time_model & tm) {
    const param_groups pg = model_param_groups(tm.model);
    return {{"type", tm.weights_name()}, {"read_bytes_per_ubatch", tm.weight_sizes().read_per_ubatch()},
            {"file_bytes", tm.weight_sizes().file_bytes()}, {"n_params", tm.weight_sizes().n_params},
            {"params", {{"attn", pg.attn}, {"ffn", pg.ffn}, {"token_embd", pg.token_embd}, {"output", pg.output},
                        {"norm", pg.norm}}}};
}

std::string mib(size_t b) { return fmt::format("{:.2f} MiB", (double) b / (1024.0 * 1024.0)); }

// summary.json's server.speculative (with -md): the options as the run applied them.
json spec_json(const replay_options & opt) {
    const spec_params & s = opt.server.spec;
    return {{"draft_model", opt.draft_model->name}, {"type", s.draft_simple ? "draft-simple" : "none"},
            {"speculating", s.enabled()}, {"n_max", s.n_max}, {"n_min", s.n_min},
            {"acceptance_rates", s.acceptance_rates()},
            {"cache_type_k_draft", ggml_type_name(opt.type_k_draft)}, {"cache_type_v_draft", ggml_type_name(opt.type_v_draft)}};
}

// The terminal's "speculative decoding" row (with -md).
std::string spec_line(const replay_options & opt, const server_totals & tt) {
    if (!opt.server.spec.enabled()) {
        return fmt::format("off: -md {} without --spec-type draft-simple (llama-server loads the draft model and drops it; "
                           "its memory still counts in the fit)", opt.draft_model->name);
    }
    const double rate = tt.drafted_tokens ? (double) tt.accepted_tokens / (double) tt.drafted_tokens : 0.0;
    return fmt::format("draft {} (K/V {}/{}): {} tokens drafted, {} accepted ({:.1f} %), {} draft decode calls",
                       opt.draft_model->name, ggml_type_name(opt.type_k_draft), ggml_type_name(opt.type_v_draft),
                       tt.drafted_tokens, tt.accepted_tokens, 100.0 * rate, tt.draft_decode_calls);
}

std::string ram_cache_line(const replay_options & opt, const json & rc) {
    if (opt.server.cache_ram_mib == 0) return "off (--cache-ram 0)";
    return fmt::format("{} saves, {} restores ({} cells), {} idle-slot clears, peak {} states / {:.1f} MiB",
                       rc["saves"].get<uint64_t>(), rc["restores"].get<uint64_t>(), rc["cells_restored"].get<uint64_t>(),
                       rc["idle_slot_clears"].get<uint64_t>(), rc["peak_states"].get<uint64_t>(),
                       (double) rc["peak_bytes"].get<uint64_t>() / (1024.0 * 1024.0));
}

// The RAM prompt cache's and the checkpoints' saves and restores: K/V copied between device and host memory.
std::string host_copies_line(const json & h) {
    const double gbs = h["host_link_gbs"].get<double>();
    if (gbs <= 0) return fmt::format("{:.2f} GB saved and restored, not timed (the profile has no host_link_gbs)", h["bytes"].get<double>() / 1e9);
    return fmt::format("{:.2f} GB saved and restored at {:g} GB/s: {:.2f} s of simulated time", h["bytes"].get<double>() / 1e9, gbs,
                       h["seconds"].get<double>());
}

// "0.127 / 1.059 s" from a latency statistic of summary.json; "-" when no request got there.
std::string p50_p99(const json & st) {
    return st.value("n", 0) ? fmt::format("{:.3f} / {:.3f} s", st["p50"].get<double>(), st["p99"].get<double>()) : std::string("-");
}

// The terminal's "load" row: offered and served rates, the queue, and a plain word when the queue grew
// with the trace (the latencies then measure the backlog, not the configuration).
std::string load_line(const json & l) {
    std::string s = fmt::format("offered {:.3g} req/s, served {:.3g} req/s; queue max {}, {} unfinished at the last arrival",
                                l["offered_rps"].get<double>(), l["served_rps"].get<double>(), l["queue_max"].get<int64_t>(),
                                l["backlog_at_last_arrival"].get<uint64_t>());
    if (l["overloaded"].get<bool>()) {
        s += ": OVERLOADED, the arrivals outrun the simulated server (slow them with --rate-scale, or find the rate this "
             "configuration sustains with kvsim plan --find-rate)";
    }
    return s;
}

// The terminal's "context shifts" row: the count, or why --context-shift was turned off (server_sim::context_shift_refused).
std::string context_shift_line(bool refused, const context & ctx, const json & totals) {
    const std::string n = std::to_string(totals["context_shifts"].get<uint64_t>());
    if (!refused) return n;
    const auto c = ctx.memory().caches();
    return fmt::format("{}: --context-shift is off, as llama-server turns it off (\"ctx_shift is not supported by this "
                       "context\"): the SWA cache ({} cells) is smaller than the base cache ({}); --swa-full makes them equal",
                       n, c.back()->get_size(), c.front()->get_size());
}

// The terminal's "cache reuse" row (--cache-reuse): chunks moved by KV shifting, off, or refused like context shift.
std::string cache_reuse_line(const server_sim & sim, const json & cr) {
    if (sim.cache_reuse_refused()) {
        return "off: --cache-reuse is off, as llama-server turns it off (\"cache_reuse is not supported by this context\"); "
               "--swa-full makes the SWA cache the base cache's size";
    }
    if (sim.params().n_cache_reuse == 0) return "off (--cache-reuse 0, llama-server's default)";
    return fmt::format("{} chunks of >= {} tokens, {} tokens (part of the prefix reuse above)", cr["chunks"].get<uint64_t>(),
                       sim.params().n_cache_reuse, cr["tokens"].get<uint64_t>());
}

terminal_rows request_terminal_rows(const replay_options & opt, const server_sim & sim, const context & ctx, const json & totals,
                                    const json & lat, const occupancy_recorder & occ) {
    const auto & oc = lat["outcomes"];
    return {
        {"context", context_line(ctx)},
        {"n_ctx chosen", opt.n_ctx_origin},
        {"KV memory", mib(compute_kv_bytes(ctx.model(), ctx.params(), ctx.sizes()).total())},
        {"memory", memory_line(replay_memory(opt, ctx.params(), ctx.sizes(), true))},
        {"outcomes", fmt::format("{} done, {} truncated, {} failed", oc["done"].get<uint64_t>(), oc["truncated"].get<uint64_t>(),
                                 oc["failed"].get<uint64_t>())},
        {"tokens decoded", fmt::format("{} prompt + {} generated", totals["prompt_tokens_decoded"].get<uint64_t>(),
                                       totals["gen_tokens_decoded"].get<uint64_t>())},
        {"steps / decode calls", fmt::format("{} / {} ({} no-slot returns, {} halvings, {} idle purges)",
                                             totals["steps"].get<uint64_t>(), totals["decode_calls"].get<uint64_t>(),
                                             totals["decode_no_slot"].get<uint64_t>(), totals["batch_halvings"].get<uint64_t>(),
                                             totals["idle_slot_purges"].get<uint64_t>())},
        {"context shifts", context_shift_line(sim.context_shift_refused(), ctx, totals)},
        {"prefix reuse", fmt::format("{} hits, {} tokens", totals["prefix_reuse_hits"].get<uint64_t>(),
                                     totals["prefix_tokens_reused"].get<uint64_t>())},
        {"cache reuse", cache_reuse_line(sim, totals["cache_reuse"])},
        {"RAM prompt cache", ram_cache_line(opt, totals["ram_cache"])},
        {"host copies", host_copies_line(totals["host_copies"])},
        {"context checkpoints", opt.model.has_swa() && !opt.ctx.swa_full && opt.server.n_ctx_checkpoints > 0
                                    ? fmt::format("{} created, {} restored", totals["context_checkpoints"]["created"].get<uint64_t>(),
                                                  totals["context_checkpoints"]["restored"].get<uint64_t>())
                                    : std::string("none (no sliding-window layers, --swa-full or --ctx-checkpoints 0)")},
        {"peak used cells / n_kv", fmt::format("{} (all streams) / {} (per stream)", occ.peaks().used, occ.peaks().n_kv)},
        {"SWA-reused cells", std::to_string(totals["swa_reused_cells"].get<uint64_t>())},
        {"simulated time", fmt::format("{:.2f} s ({} weights on {}: {})", totals["sim_seconds"].get<double>(),
                                       opt.weights ? opt.weights->name : "f16", opt.device.name, opt.device.source)},
        {"time accuracy", time_accuracy_note(opt.device)},
        {"TTFT p50 / p99", p50_p99(lat["ttft_s"])},
        {"TPOT p50 / p99", p50_p99(lat["tpot_s"])},
    };
}

request_trace read_trace(const replay_options & opt) {
    std::optional<request_format> fmt_opt;
    if (opt.format != "auto") fmt_opt = parse_request_format(opt.format);
    request_trace t = read_request_trace(opt.trace, fmt_opt);
    if (opt.limit && t.requests.size() > opt.limit) t.requests.resize(opt.limit);
    if (opt.rate_scale != 1.0 && opt.server.arrivals == arrival_mode::saturate) {
        throw usage_error(fmt::format("--rate-scale {}: with --arrivals saturate requests are admitted as soon as a slot frees, "
                                      "whatever their arrival times", opt.rate_scale));
    }
    scale_arrival_rate(t, opt.rate_scale);
    return t;
}

class request_driver : public replay_driver {
public:
    explicit request_driver(const replay_options & opt)
        : opt_(opt), trace_(read_trace(opt)), emit_(emitted_), draft_emit_(draft_emitted_) {
        emitted_.path = opt.emit_ops;
        draft_emitted_.path = opt.emit_draft_ops;
    }

    bool is_request_trace() const override { return true; }

    replay_clock attach(context & ctx) override {
        run_ = std::make_unique<op_runner>(ctx);
        std::optional<draft_binding> draft;
        if (opt_.server.spec.enabled()) {
            // common_base_params_to_speculative: the target's context parameters, the draft's K/V types
            context_params p = ctx.params();
            p.type_k = opt_.type_k_draft;
            p.type_v = opt_.type_v_draft;
            draft_ctx_ = std::make_unique<context>(*opt_.draft_model, p);
            draft_run_ = std::make_unique<op_runner>(*draft_ctx_);
            draft.emplace(draft_binding{*draft_run_, step_time_model{opt_.device, *opt_.draft_model, opt_.weights}});
        }
        sim_ = std::make_unique<server_sim>(*run_, opt_.server, step_time_model{opt_.device, opt_.model, opt_.weights},
                                            draft ? &*draft : nullptr);
        replay_clock c{sim_->clock()};
        c.feedback = &sim_->timer();
        c.no_slot = &sim_->totals().decode_no_slot;
        c.occupancy_every = opt_.occupancy_every ? opt_.occupancy_every : auto_occupancy_every(trace_, ctx);
        c.timeline_every = std::max<uint64_t>(1, occ_every_for_timeline(trace_, ctx));
        return c;
    }

    // steps.csv's recorder sees the cache and the door after the shared observers, then the door
    // gets them all and --emit-ops' recorder last.
    void observe(replay_observers & obs, replay_outputs & out) override {
        if (out.steps) {
            steps_ = std::make_unique<steps_recorder>();
            obs.ops.add(steps_.get());
            sim_->timer().add_observer(steps_.get());
        }
        if (opt_.suggest_bench) sim_->timer().add_observer(&coverage_);
        run_->add_op_observer(obs.op_observers());
        if (out.emit) run_->add_op_observer(&emit_);
        if (out.emit_draft) draft_run_->add_op_observer(&draft_emit_);
        run_->set_observer(&obs.fan);
    }

    void drive(replay_observers & obs, progress_bar & bar) override {
        sim_->run(trace_, [&](size_t done, size_t total) {
            if (obs.timeline) obs.timeline->step_done();
            bar.update(done, total);
        });
    }

    replay_report report(const context & ctx, const occupancy_recorder & occ, double wall) override {
        const server_totals & tt = sim_->totals();
        const step_time_model & tm = sim_->timer().model();
        // latencies and load are the trace's requests'; their extra completions (n_cmpl) are in requests.csv only
        const std::vector<request_result> reqs(sim_->results().begin(), sim_->results().begin() + (long) trace_.requests.size());
        const json lat = latency_summary(reqs);
        const json load = load_summary(reqs, ctx.params().n_seq_max);
        json totals = request_totals_json(trace_, tt, ctx);
        if (opt_.server.spec.enabled()) {
            totals["speculative"] = {{"drafted_tokens", tt.drafted_tokens}, {"accepted_tokens", tt.accepted_tokens},
                                     {"draft_decode_calls", tt.draft_decode_calls}};
        }
        totals["host_copies"] = {{"bytes", sim_->timer().host_copy_bytes()}, {"seconds", sim_->timer().host_copy_seconds()},
                                 {"host_link_gbs", tm.device.host_link_gbs}};
        replay_report rep;
        rep.summary = {{"kind", "request_trace"},
                       {"format", request_format_name(trace_.format)},
                       {"server", server_json(*sim_)},
                       {"step_time_model", tm.describe()},
                       {"device", device_profile_json(tm.device)},
                       {"time_accuracy", time_accuracy_json(tm.device)},
                       {"weights", weights_json(tm)},
                       {"totals", totals},
                       {"latency", lat},
                       {"load", load},
                       {"bookkeeping_tokens_per_second",
                        wall > 0 ? (double) (tt.prompt_tokens_decoded + tt.gen_tokens_decoded) / wall : 0}};
        if (tt.interrupted) rep.summary["interrupted"] = {{"at_step", tt.steps}, {"sim_seconds", tt.sim_seconds}};
        if (opt_.draft_model) rep.summary["server"]["speculative"] = spec_json(opt_);
        rep.rows = request_terminal_rows(opt_, *sim_, ctx, totals, lat, occ);
        if (opt_.draft_model) {
            const auto at = std::find_if(rep.rows.begin(), rep.rows.end(), [](const auto & r) { return r.first == "cache reuse"; });
            rep.rows.insert(at == rep.rows.end() ? at : at + 1, {"speculative decoding", spec_line(opt_, tt)});
        }
        // right under the simulated times: why they may not hold
        auto warnings = profile_warnings(tm.device, ctx.model(), tm.weights_name(),
                                         {kv_types_name(ctx.params().type_k, ctx.params().type_v)}, ctx.params().flash_attn);
        if (opt_.server.spec.enabled()) {
            warnings.push_back(fmt::format("the draft model's decode calls are timed by the same profile with {}'s shape and "
                                           "{} weights; no validation covers speculative decoding", opt_.draft_model->name,
                                           tm.weights_name()));
        }
        // llama.cpp ropes the whole cache after each context shift (step_time.h: ubatch_terms::k_shift_thetas)
        if (tt.context_shifts > 0 && tm.device.k_shift_s_per_theta == 0) {
            warnings.push_back(fmt::format("{} context shift(s): this profile does not price llama.cpp's K-shift (k_shift_s_per_theta "
                                           "0; a rope over every cell of the cache in the next llama_decode, 3.5x a Qwen2.5-0.5B "
                                           "decode step at 8192 cells on one CPU core: docs/time-model.md)", tt.context_shifts));
        }
        if (!warnings.empty()) rep.summary["time_model_warnings"] = warnings;
        const auto sim = std::find_if(rep.rows.begin(), rep.rows.end(), [](const auto & r) { return r.first == "time accuracy"; });
        size_t at = sim == rep.rows.end() ? rep.rows.size() : (size_t) (sim - rep.rows.begin()) + 1;
        for (const auto & w : warnings) rep.rows.insert(rep.rows.begin() + (long) at++, {"WARNING", w});
        if (!opt_.memory_warning.empty()) {
            rep.summary["memory_warning"] = opt_.memory_warning;
            const auto mem = std::find_if(rep.rows.begin(), rep.rows.end(), [](const auto & r) { return r.first == "memory"; });
            rep.rows.insert(mem == rep.rows.end() ? rep.rows.end() : mem + 1, {"WARNING", opt_.memory_warning});
        }
        rep.rows.emplace_back("load", load_line(load));
        if (const std::string cmd = opt_.suggest_bench ? coverage_.command(ctx.params()) : ""; !cmd.empty()) {
            const std::string covers = coverage_.coverage(ctx.params());
            rep.summary["suggested_llama_bench"] = {{"command", cmd}, {"covers", covers}};
            rep.rows.emplace_back("calibrate with", cmd);
            rep.rows.emplace_back("  (covers)", covers);
        }
        if (tt.interrupted) {
            rep.interrupted = fmt::format("stopped after step {} (simulated {:.2f} s); unfinished requests are 'pending'", tt.steps,
                                          tt.sim_seconds);
        }
        rep.wall = fmt::format("{:.2f} s", wall);
        rep.title = fmt::format("kvsim replay {} ({} trace, {} requests, model {})", opt_.trace, request_format_name(trace_.format),
                                trace_.requests.size(), ctx.model().name);
        rep.requests = &sim_->results();
        return rep;
    }

    void write(replay_outputs & out) override {
        if (out.emit) write_op_trace(out.emit->out(), emitted_);
        if (out.emit_draft) write_op_trace(out.emit_draft->out(), draft_emitted_);
        if (out.requests) write_requests_csv(out.requests->out(), sim_->results(), opt_.server.spec.enabled());
        if (steps_) steps_->write_csv(out.steps->out());
    }

private:
    const replay_options & opt_;
    request_trace trace_;
    op_trace emitted_;    // --emit-ops: every op the server made, as a replayable op trace
    op_recorder emit_;    // appends to emitted_
    op_trace draft_emitted_;     // --emit-draft-ops: the draft context's ops
    op_recorder draft_emit_;
    std::unique_ptr<op_runner> run_;    // the op door on the context
    std::unique_ptr<context> draft_ctx_;      // speculative decoding: the draft model's context
    std::unique_ptr<op_runner> draft_run_;    // and its op door
    std::unique_ptr<server_sim> sim_;   // the server; its clock is the replay's
    std::unique_ptr<steps_recorder> steps_;
    bench_coverage coverage_;   // --suggest-bench
};

}  // namespace

std::unique_ptr<replay_driver> make_request_driver(const replay_options & opt) { return std::make_unique<request_driver>(opt); }

}  // namespace kvsim
