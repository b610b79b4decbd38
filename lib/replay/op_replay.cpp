#include "replay/op_replay.h"

#include "util/errors.h"

#include <fmt/format.h>
#include <map>
#include <stdexcept>

namespace kvsim {

namespace {
// Forwards decode events to the cell dump (with the op's line) and to the caller's observer.
class replay_observer : public decode_observer {
public:
    replay_observer(cell_dumper * dump, decode_observer * next) : dump_(dump), next_(next) {}
    long line = 0;

    void on_update(const kv_memory & mem) override {
        if (next_) next_->on_update(mem);
    }
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        if (dump_) dump_->apply(line, c, sinfo);
        if (next_) next_->on_apply(c, sinfo, ub, n_kv);
    }

private:
    cell_dumper * dump_;
    decode_observer * next_;
};

std::string op_text(const op_group & g) {
    const op_row & r = g.rows.front();
    std::string s = op_kind_name(g.op);
    if (g.op == op_kind::decode) {
        for (const auto & row : g.rows) {
            s += fmt::format(" {}:{}{}", fmt::join(row.seqs, ","), row.n_tokens, row.has_p0 ? fmt::format("@{}", row.p0) : "");
        }
        return s;
    }
    if (g.op == op_kind::clear) return s;
    s += fmt::format(" {}", r.seqs.empty() ? -1 : r.seqs[0]);
    if (g.op == op_kind::cp) s += fmt::format(" {}", r.seq_dst);
    if (g.op != op_kind::keep) s += fmt::format(" {} {}", r.p0, r.p1);
    if (g.op == op_kind::add || g.op == op_kind::div) s += fmt::format(" {}", r.delta);
    return s;
}

void run_seq_op(const op_group & g, kv_memory & mem) {
    const op_row & r = g.rows.front();
    const llama_seq_id s = r.seqs.empty() ? -1 : r.seqs[0];
    switch (g.op) {
        case op_kind::rm: mem.seq_rm(s, r.p0, r.p1); break;
        case op_kind::cp: mem.seq_cp(s, r.seq_dst, r.p0, r.p1); break;
        case op_kind::keep: mem.seq_keep(s); break;
        case op_kind::add: mem.seq_add(s, r.p0, r.p1, r.delta); break;
        case op_kind::div: mem.seq_div(s, r.p0, r.p1, r.delta); break;
        case op_kind::clear: mem.clear(); break;
        case op_kind::decode: break;
    }
}
}  // namespace

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

op_replay_result replay_ops(const op_trace & t, context & ctx, cell_dumper * dump, decode_observer * obs,
                            const std::function<void(size_t, size_t)> & progress) {
    op_replay_result res;
    replay_observer robs(dump, obs);
    const uint32_t n_seq_ids = ctx.memory().caches().front()->n_seq_ids();
    for (size_t gi = 0; gi < t.groups.size(); ++gi) {
        const op_group & g = t.groups[gi];
        robs.line = g.line;
        int rc = 0;
        try {
            if (g.op == op_kind::decode) {
                const llama_batch_in b = make_decode_batch(g, ctx.memory(), n_seq_ids);
                if (b.n_tokens() > ctx.sizes().n_batch) {
                    throw input_error(t.path, g.line, std::to_string(b.n_tokens()),
                                      fmt::format("decode batch of {} tokens exceeds n_batch = {} (-b)", b.n_tokens(),
                                                  ctx.sizes().n_batch));
                }
                rc = ctx.decode(b, &robs);
                ++res.n_decode;
                res.n_decode_ok += rc == DECODE_OK;
                res.n_no_slot += rc == DECODE_NO_SLOT;
                res.n_invalid += rc == DECODE_INVALID;
                res.n_tokens_placed += rc == DECODE_OK ? b.n_tokens() : 0;
            } else {
                run_seq_op(g, ctx.memory());
                ++res.n_seq_ops;
            }
        } catch (const std::out_of_range & e) {
            throw input_error(t.path, g.line, op_text(g), e.what());
        } catch (const std::invalid_argument & e) {
            throw input_error(t.path, g.line, op_text(g), e.what());
        }
        if (dump) {
            dump->state(g.line, op_text(g), ctx, g.op == op_kind::decode, rc);
        }
        if (progress) {
            progress(gi + 1, t.groups.size());
        }
    }
    res.n_ubatches = ctx.n_ubatches();
    return res;
}

}  // namespace kvsim
