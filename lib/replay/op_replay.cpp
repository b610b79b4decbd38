#include "replay/op_replay.h"

#include "drive/op_runner.h"
#include "core/errors.h"
#include "util/interrupt.h"
#include "util/nvtx.h"

#include <fmt/format.h>
#include <cstdint>
#include <limits>
#include <map>

namespace kvsim {

namespace {
// seq_add / seq_div change every matching cell's position and pending shift (kv_cells::pos_add,
// pos_div); refuse the op when one of them would leave the int32 range rather than overflow.
void check_pos_op(const op_trace & t, const op_group & g, const context & ctx) {
    const op_row & r = g.rows.front();
    const llama_seq_id s = r.seqs.empty() ? -1 : r.seqs[0];
    if (s < 0 || s >= LLAMA_MAX_SEQ) return;   // the cache refuses the id itself
    const int64_t p0 = r.p0 < 0 ? 0 : r.p0;
    const int64_t p1 = r.p1 < 0 ? std::numeric_limits<int64_t>::max() : r.p1;
    constexpr int64_t lo = std::numeric_limits<llama_pos>::min(), hi = std::numeric_limits<llama_pos>::max();
    for (const kv_cache * c : ctx.memory().caches()) {
        for (uint32_t st = 0; st < c->get_n_stream(); ++st) {
            const kv_cells & cells = c->cells(st);
            for (uint32_t i = 0; i < cells.size(); ++i) {
                const int64_t pos = cells.pos()[i];
                if (pos < 0 || !cells.seq()[i].test((size_t) s) || pos < p0 || pos >= p1) continue;
                const int64_t shift = cells.shift()[i];
                int64_t new_pos = pos, new_shift = shift;
                if (g.op == op_kind::add) {
                    new_pos = pos + r.delta;
                    new_shift = shift + r.delta;
                } else if (r.delta > 0) {
                    new_pos = pos / r.delta;
                    new_shift = shift + (pos - new_pos);
                }
                if (new_pos > hi || new_shift < lo || new_shift > hi) {
                    throw input_error(t.path, g.line, std::to_string(r.delta),
                                      fmt::format("{} by {} moves seq {} position {} (pending shift {}) outside the int32 range",
                                                  op_kind_name(g.op), r.delta, s, pos, shift));
                }
            }
        }
    }
}

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
    if (g.op == op_kind::add || g.op == op_kind::div) check_pos_op(t, g, ctx);
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
            throw input_error(t.path, g.line, op_text(g), e.what());
        }
        if (progress) {
            progress(gi + 1, t.groups.size());
        }
    }
    res.n_ubatches = ctx.n_ubatches();
    return res;
}

}  // namespace kvsim
