#include "replay/op_replay.h"

#include "replay/op_runner.h"
#include "util/errors.h"
#include "util/interrupt.h"

#include <fmt/format.h>
#include <map>
#include <stdexcept>

namespace kvsim {

llama_batch_in make_decode_batch(const op_group & g, const kv_memory & mem, uint32_t n_seq_ids) {
    std::map<llama_seq_id, llama_pos> next;
    auto next_of = [&](llama_seq_id s) {
        auto it = next.find(s);
        if (it != next.end()) return it->second;
        // a seq id the memory cannot hold starts at 0; llama_decode then rejects the batch
        const llama_pos p = s >= 0 && (uint32_t) s < n_seq_ids ? mem.seq_pos_max(s) + 1 : 0;
        return next[s] = p;
    };
    llama_batch_in b;
    for (const op_row & r : g.rows) {
        const llama_pos p = r.has_p0 ? r.p0 : next_of(r.seqs[0]);
        for (int32_t k = 0; k < r.n_tokens; ++k) {
            b.add(p + k, r.seqs);
        }
        for (llama_seq_id s : r.seqs) {
            next[s] = p + r.n_tokens;
        }
    }
    return b;
}

namespace {
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
        case op_kind::add: run.seq_add(s, r.p0, r.p1, r.delta, g.line); break;
        case op_kind::div: run.seq_div(s, r.p0, r.p1, r.delta, g.line); break;
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
