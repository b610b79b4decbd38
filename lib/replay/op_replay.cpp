#include "replay/op_replay.h"

#include "replay/op_runner.h"
#include "util/errors.h"
#include "util/interrupt.h"
#include "util/nvtx.h"

#include <fmt/format.h>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>

namespace kvsim {

llama_batch_in make_decode_batch(const op_group & g, const kv_memory & mem, uint32_t n_seq_ids) {
    // positions are computed in 64 bits: a token at a position past INT32_MAX (or a sequence whose
    // next position would be) is refused instead of overflowing llama_pos
    constexpr int64_t pos_max = std::numeric_limits<llama_pos>::max();
    std::map<llama_seq_id, int64_t> next;
    auto next_of = [&](llama_seq_id s) {
        auto it = next.find(s);
        if (it != next.end()) return it->second;
        // a seq id the memory cannot hold starts at 0; llama_decode then rejects the batch
        const int64_t p = s >= 0 && (uint32_t) s < n_seq_ids ? (int64_t) mem.seq_pos_max(s) + 1 : 0;
        return next[s] = p;
    };
    llama_batch_in b;
    for (const op_row & r : g.rows) {
        const int64_t p = r.has_p0 ? (int64_t) r.p0 : next_of(r.seqs[0]);
        if (p + r.n_tokens > pos_max) {
            throw std::out_of_range(fmt::format("decode positions {}..{} run past the largest position {} (int32)", p,
                                                p + r.n_tokens - 1, pos_max - 1));
        }
        for (int32_t k = 0; k < r.n_tokens; ++k) {
            b.add((llama_pos) (p + k), r.seqs);
        }
        for (llama_seq_id s : r.seqs) {
            next[s] = p + r.n_tokens;
        }
    }
    return b;
}

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
    context & ctx = run.ctx();
    const op_row & r = g.rows.front();
    const llama_seq_id s = r.seqs.empty() ? -1 : r.seqs[0];
    switch (g.op) {
        case op_kind::decode: {
            int64_t n_total = 0;   // checked before expanding rows into tokens (rows may claim billions)
            for (const op_row & row : g.rows) n_total += row.n_tokens;
            if (n_total > (int64_t) ctx.sizes().n_batch) {
                throw input_error(t.path, g.line, std::to_string(n_total),
                                  fmt::format("decode batch of {} tokens exceeds n_batch = {} (-b)", n_total, ctx.sizes().n_batch));
            }
            const llama_batch_in b = make_decode_batch(g, ctx.memory(), ctx.memory().caches().front()->n_seq_ids());
            if (b.n_tokens() > ctx.sizes().n_batch) {
                throw input_error(t.path, g.line, std::to_string(b.n_tokens()),
                                  fmt::format("decode batch of {} tokens exceeds n_batch = {} (-b)", b.n_tokens(),
                                              ctx.sizes().n_batch));
            }
            const int rc = run.decode(b, g.line);
            ++res.n_decode;
            res.n_decode_ok += rc == DECODE_OK;
            res.n_no_slot += rc == DECODE_NO_SLOT;
            res.n_invalid += rc == DECODE_INVALID;
            res.n_tokens_placed += rc == DECODE_OK ? b.n_tokens() : 0;
            return rc;
        }
        case op_kind::rm: run.seq_rm(s, r.p0, r.p1, g.line); break;
        case op_kind::cp: run.seq_cp(s, r.seq_dst, r.p0, r.p1, g.line); break;
        case op_kind::keep: run.seq_keep(s, g.line); break;
        case op_kind::add: check_pos_op(t, g, ctx); run.seq_add(s, r.p0, r.p1, r.delta, g.line); break;
        case op_kind::div: check_pos_op(t, g, ctx); run.seq_div(s, r.p0, r.p1, r.delta, g.line); break;
        case op_kind::clear: run.clear(g.line); break;
    }
    ++res.n_seq_ops;
    return 0;
}
}  // namespace

op_replay_result replay_ops(const op_trace & t, context & ctx, cell_dumper * dump, decode_observer * obs,
                            const std::function<void(size_t, size_t)> & progress) {
    op_replay_result res;
    op_runner run(ctx, dump, nullptr, obs);
    for (size_t gi = 0; gi < t.groups.size(); ++gi) {
        const op_group & g = t.groups[gi];
        if (interrupted()) {
            res.interrupted_at_line = g.line;
            break;
        }
        try {
            KVSIM_NVTX_RANGE("step", (int64_t) gi + 1);   // one op group = one replay step (its ops, then its decode)
            run_group(t, g, run, res);
        } catch (const std::out_of_range & e) {
            throw input_error(t.path, g.line, op_text(g), e.what());
        } catch (const std::invalid_argument & e) {
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
