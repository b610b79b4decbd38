#include "replay/op_runner.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

// Tags each ubatch placement with the running op's line before passing it on.
class op_runner::forwarder : public decode_observer {
public:
    forwarder(op_runner & r) : r_(r) {}
    void on_update(const kv_memory & mem) override {
        if (r_.obs_) r_.obs_->on_update(mem);
    }
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        if (r_.dump_) r_.dump_->apply(r_.line_, c, sinfo);
        if (r_.obs_) r_.obs_->on_apply(c, sinfo, ub, n_kv);
    }

private:
    op_runner & r_;
};

op_runner::op_runner(context & ctx, cell_dumper * dump, op_trace * record, decode_observer * obs)
    : ctx_(ctx), dump_(dump), record_(record), obs_(obs) {}

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

op_group decode_group_of(const llama_batch_in & b, const std::string & label, long line) {
    op_group g;
    g.op = op_kind::decode;
    g.line = line;
    for (uint32_t i = 0; i < b.n_tokens(); ++i) {
        if (!g.rows.empty()) {
            op_row & last = g.rows.back();
            const auto ids = b.seq_id[i];
            if (std::equal(last.seqs.begin(), last.seqs.end(), ids.begin(), ids.end()) && last.p0 + last.n_tokens == b.pos[i]) {
                ++last.n_tokens;
                continue;
            }
        }
        op_row r;
        r.line = line;
        r.op = op_kind::decode;
        r.batch = label;
        r.seqs.assign(b.seq_id[i].begin(), b.seq_id[i].end());
        r.n_tokens = 1;
        r.p0 = b.pos[i];
        r.has_p0 = true;
        g.rows.push_back(std::move(r));
    }
    return g;
}

void op_runner::after_op(const op_group & g, bool is_decode, int rc) {
    if (dump_) dump_->state(g.line, op_text(g), ctx_, is_decode, rc);
    if (obs_ && obs_->wants_ops()) obs_->on_op(g, rc);
    if (record_) record_->groups.push_back(g);
}

int op_runner::decode(const llama_batch_in & batch, long line, const std::string & label) {
    line_ = line;
    forwarder fw(*this);
    const int rc = ctx_.decode(batch, &fw);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) {
        after_op(decode_group_of(batch, label.empty() ? fmt::format("d{}", n_decode_) : label, line), true, rc);
    }
    ++n_decode_;
    return rc;
}

op_group op_runner::seq_op_group(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst,
                                 long line) {
    op_row r;
    r.line = line;
    r.op = k;
    if (k != op_kind::clear) r.seqs = {s};
    r.p0 = p0 < 0 ? -1 : p0;
    r.p1 = p1 < 0 ? -1 : p1;
    r.delta = delta;
    r.seq_dst = dst;
    op_group g;
    g.op = k;
    g.line = line;
    g.rows.push_back(std::move(r));
    return g;
}

bool op_runner::seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1, long line) {
    const bool ok = ctx_.memory().seq_rm(s, p0, p1);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::rm, s, p0, p1, 0, -1, line), false, 0);
    return ok;
}

void op_runner::seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1, long line) {
    ctx_.memory().seq_cp(src, dst, p0, p1);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::cp, src, p0, p1, 0, dst, line), false, 0);
}

void op_runner::seq_keep(llama_seq_id s, long line) {
    ctx_.memory().seq_keep(s);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::keep, s, -1, -1, 0, -1, line), false, 0);
}

void op_runner::seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos delta, long line) {
    ctx_.memory().seq_add(s, p0, p1, delta);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::add, s, p0, p1, delta, -1, line), false, 0);
}

void op_runner::seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d, long line) {
    ctx_.memory().seq_div(s, p0, p1, d);
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::div, s, p0, p1, d, -1, line), false, 0);
}

bool op_runner::restore(llama_seq_id dest, const std::vector<std::vector<llama_pos>> & pos, bool partial,
                        const std::string & label, uint32_t n_chunk, long line) {
    const auto caches = ctx_.memory().caches();
    bool ok = true;
    for (size_t i = 0; i < caches.size() && i < pos.size() && ok; ++i) {
        std::pair<slot_info, ubatch> placed;
        ok = caches[i]->restore_seq(dest, pos[i], &placed);
        if (ok && !pos[i].empty() && obs_) obs_->on_restore(*caches[i], placed.first, placed.second);
    }
    if (!ok) ctx_.memory().seq_rm(dest, -1, -1);
    if (partial || !(dump_ || record_ || (obs_ && obs_->wants_ops()))) return ok;
    after_op(seq_op_group(op_kind::rm, dest, -1, -1, 0, -1, line), false, 0);
    const std::vector<llama_pos> & p = pos.front();
    llama_batch_in b;
    for (size_t o = 0, k = 0; o < p.size(); o += n_chunk, ++k) {
        b.pos.clear();
        b.seq_id.clear();
        for (size_t i = o; i < std::min(p.size(), o + n_chunk); ++i) b.add(p[i], {dest});
        after_op(decode_group_of(b, fmt::format("{}.{}", label, k), line), true, ok ? 0 : 1);
    }
    return ok;
}

void op_runner::clear(long line) {
    ctx_.memory().clear();
    if (dump_ || record_ || (obs_ && obs_->wants_ops())) after_op(seq_op_group(op_kind::clear, -1, -1, -1, 0, -1, line), false, 0);
}

}  // namespace kvsim
