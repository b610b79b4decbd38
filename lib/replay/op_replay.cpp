#include "replay/op_replay.h"

#include "drive/op_runner.h"
#include "core/errors.h"
#include "util/interrupt.h"
#include "util/nvtx.h"

#include <fmt/format.h>
#include <cstdint>

namespace kvsim {

namespace {
int run_group(const op_trace & t, const op_group & g, op_runner & run, op_replay_result & res) {
    const context & ctx = run.ctx();
    if (g.op == op_kind::decode) {
        int64_t n_total = 0;   // checked before expanding rows into tokens (rows may claim billions)
        for (const op_row & row : g.rows) n_total += row.n_tokens;
        if (n_total > (int64_t) ctx.sizes().n_batch) {
            throw input_error(t.path, g.line, std::to_string(n_total),
                              fmt::format("decode batch of {} tokens exceeds n_batch = {} (-b)", n_total, ctx.sizes().n_batch));
        }
        const int rc = run.run(g);
        ++res.n_decode;
        res.n_decode_ok += rc == DECODE_OK;
        res.n_no_slot += rc == DECODE_NO_SLOT;
        res.n_invalid += rc == DECODE_INVALID;
        res.n_tokens_placed += rc == DECODE_OK ? (uint64_t) n_total : 0;
        return rc;
    }
    run.run(g);
    ++res.n_seq_ops;
    return 0;
}
}  // namespace

op_replay_result replay_ops(const op_trace & t, context & ctx, op_observer * ops, decode_observer * obs,
                            const std::function<void(size_t, size_t)> & progress) {
    op_replay_result res;
    op_runner run(ctx, ops, nullptr, obs);
    for (size_t gi = 0; gi < t.groups.size(); ++gi) {
        const op_group & g = t.groups[gi];
        if (interrupted()) {
            res.interrupted_at_line = g.line;
            break;
        }
        try {
            KVSIM_NVTX_RANGE("step", (int64_t) gi + 1);   // one op group = one replay step (its ops, then its decode)
            run_group(t, g, run, res);
        } catch (const lib_error & e) {   // the library's refusals; anything else is a bug, not the trace's
            throw input_error(t.path, g.line, e.value().empty() ? op_text(g) : e.value(), e.what());
        }
        if (progress) {
            progress(gi + 1, t.groups.size());
        }
    }
    res.n_ubatches = ctx.n_ubatches();
    return res;
}

}  // namespace kvsim
