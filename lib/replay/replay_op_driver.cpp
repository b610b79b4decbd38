// The op-trace driver of the replay skeleton: the trace's op groups in order through the op door
// (replay_ops, op_replay.h). There is no server and no simulated time: the clock is the op group.
#include "replay/replay_driver.h"

#include "core/errors.h"
#include "replay/op_replay.h"
#include "trace/op_trace.h"

#include <fmt/format.h>

namespace kvsim {

namespace {

// An op trace already is the op stream: there is no server, no arrivals and no simulated time, so
// the options that shape those would be silently ignored. Refused instead, before any work.
void check_op_trace_options(const replay_options & opt) {
    const auto & given = opt.request_only_given;
    if (given.empty()) return;
    throw usage_error(fmt::format("{} {} to request traces only; {} is an op trace (no server to simulate)",
                                  fmt::join(given, ", "), given.size() == 1 ? "applies" : "apply", opt.trace));
}

class op_driver : public replay_driver {
public:
    explicit op_driver(const replay_options & opt) : opt_(opt) {
        check_op_trace_options(opt);
        trace_ = read_op_trace(opt.trace);
    }

    bool is_request_trace() const override { return false; }

    replay_clock attach(context & ctx) override {
        ctx_ = &ctx;
        replay_clock c{clock_};
        c.occupancy_every = opt_.occupancy_every ? opt_.occupancy_every : 1;
        return c;
    }

    void observe(replay_observers &, replay_outputs &) override {}

    void drive(replay_observers & obs, progress_bar & bar) override {
        result_ = replay_ops(trace_, *ctx_, obs.op_observers(), &obs.fan, [&](size_t done, size_t total) {
            clock_.set_step(done);
            bar.update(done, total);
        });
    }

    replay_report report(const context & ctx, const occupancy_recorder & occ, double wall) override {
        const op_replay_result & r = result_;
        replay_report rep;
        rep.summary = {{"kind", "op_trace"},
                       {"totals", {{"decode_calls", r.n_decode}, {"decode_ok", r.n_decode_ok}, {"decode_no_slot", r.n_no_slot},
                                   {"decode_invalid", r.n_invalid}, {"seq_ops", r.n_seq_ops}, {"ubatches", r.n_ubatches},
                                   {"tokens_placed", r.n_tokens_placed}}}};
        if (r.interrupted_at_line) rep.summary["interrupted"] = {{"at_line", r.interrupted_at_line}};
        rep.rows = {
            {"context", context_line(ctx)},
            {"decodes", fmt::format("{} (ok {}, no slot {}, invalid {})", r.n_decode, r.n_decode_ok, r.n_no_slot, r.n_invalid)},
            {"sequence ops", std::to_string(r.n_seq_ops)},
            {"ubatches", std::to_string(r.n_ubatches)},
            {"tokens placed", std::to_string(r.n_tokens_placed)},
            {"peak used cells / n_kv", fmt::format("{} (all streams) / {} (per stream)", occ.peaks().used, occ.peaks().n_kv)},
        };
        if (r.interrupted_at_line) rep.interrupted = fmt::format("stopped before line {} of {}", r.interrupted_at_line, opt_.trace);
        rep.wall = fmt::format("{:.3f} s", wall);
        rep.title = fmt::format("kvsim replay {} (op trace, model {})", opt_.trace, ctx.model().name);
        return rep;
    }

    void write(replay_outputs &) override {}   // occupancy, summary, report and timeline are the skeleton's

private:
    const replay_options & opt_;
    op_trace trace_;
    context * ctx_ = nullptr;
    sim_clock clock_{false};   // op groups done; an op trace has no simulated time
    op_replay_result result_;
};

}  // namespace

std::unique_ptr<replay_driver> make_op_driver(const replay_options & opt) { return std::make_unique<op_driver>(opt); }

}  // namespace kvsim
