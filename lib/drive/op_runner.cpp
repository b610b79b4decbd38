#include "drive/op_runner.h"

#include "core/errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>

namespace kvsim {

// Tags each ubatch placement with the running op's line before passing it on.
class op_runner::forwarder : public decode_observer {
public:
    forwarder(op_runner & r) : r_(r) {}
    void on_update(const kv_memory & mem) override {
        if (r_.obs_) r_.obs_->on_update(mem);
    }
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        r_.ops_.on_place(r_.line_, c, sinfo);
        if (r_.obs_) r_.obs_->on_apply(c, sinfo, ub, n_kv);
    }

private:
    op_runner & r_;
};

op_runner::op_runner(context & ctx, decode_observer * obs) : ctx_(ctx), obs_(obs) {}

op_runner::op_runner(context & ctx, op_observer * first, op_trace * record, decode_observer * obs) : ctx_(ctx), obs_(obs) {
    ops_.add(first);
    if (record) {
        recorder_ = std::make_unique<op_recorder>(*record);
        ops_.add(recorder_.get());
    }
}

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
            throw lib_out_of_range(fmt::format("decode positions {}..{} run past the largest position {} (int32)", p,
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

void op_runner::after_op(const op_group & g, int rc) { ops_.on_op(g, rc); }

int op_runner::run(const op_group & g) {
    if (g.op == op_kind::decode) {
        return decode(make_decode_batch(g, ctx_.memory(), ctx_.memory().caches().front()->n_seq_ids()), g.line);
    }
    const op_row & r = g.rows.front();
    seq_op(g.op, r.seqs.empty() ? -1 : r.seqs[0], r.p0, r.p1, r.delta, r.seq_dst, g.line);
    return 0;
}

int op_runner::decode(const llama_batch_in & batch, long line, const std::string & label) {
    line_ = line;
    forwarder fw(*this);
    const int rc = ctx_.decode(batch, &fw);
    // the op's trace form costs time on long replays: built only when someone looks
    if (!ops_.empty()) after_op(decode_group_of(batch, label.empty() ? fmt::format("d{}", n_decode_) : label, line), rc);
    ++n_decode_;
    return rc;
}

namespace {
// A sequence op as observers see it: one row of the fields its kind uses (the rest at their defaults),
// negative p0/p1 as -1.
op_group seq_group(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst, long line) {
    op_row r;
    r.line = line;
    r.op = k;
    if (k != op_kind::clear) r.seqs = {s};
    const bool ranged = k != op_kind::keep && k != op_kind::clear;
    r.p0 = !ranged || p0 < 0 ? -1 : p0;
    r.p1 = !ranged || p1 < 0 ? -1 : p1;
    r.delta = k == op_kind::add || k == op_kind::div ? delta : 0;
    r.seq_dst = k == op_kind::cp ? dst : -1;
    op_group g;
    g.op = k;
    g.line = line;
    g.rows.push_back(std::move(r));
    return g;
}
}  // namespace

void op_runner::check_pos_op(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta) const {
    if (k == op_kind::div && delta <= 0) return;   // the cache refuses the divisor itself
    constexpr llama_pos hi = std::numeric_limits<llama_pos>::max();
    constexpr int64_t lo = std::numeric_limits<llama_pos>::min();
    for (const kv_cache * c : ctx_.memory().caches()) {
        if (s < 0 || (uint32_t) s >= c->n_seq_ids()) return;   // the cache refuses the seq id itself
        const kv_cells & cells = c->cells(c->seq_to_stream(s));
        // the cells the op moves (kv_cache::seq_add / seq_div: a negative bound is open), and with an
        // open end also a cell at INT32_MAX itself, which the cache's range stops before (the guard
        // has always refused an op over it; only an earlier seq_add can have put it there, so the
        // scan that finds it is rare); of those out of range, the first in cell order is named
        std::vector<uint32_t> moved = cells.seq_cells(s, p0 < 0 ? 0 : p0, p1 < 0 ? hi : p1);
        if (p1 < 0 && cells.seq_pos_max(s) == hi) {
            for (uint32_t i = 0; i < cells.size(); ++i) {
                if (!cells.is_empty(i) && cells.seq_has(i, s) && cells.pos_get(i) == hi) moved.push_back(i);
            }
        }
        uint32_t bad = cells.size();
        for (uint32_t i : moved) {
            const kv_cells::pos_shift r = k == op_kind::add ? cells.pos_add_result(i, delta) : cells.pos_div_result(i, delta);
            if ((r.pos > hi || r.shift < lo || r.shift > hi) && i < bad) bad = i;
        }
        if (bad != cells.size()) {
            throw lib_out_of_range(fmt::format("{} by {} moves seq {} position {} (pending shift {}) outside the int32 range",
                                               op_kind_name(k), delta, s, cells.pos_get(bad), cells.get_shift(bad)),
                                   std::to_string(delta));
        }
    }
}

bool op_runner::seq_op(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst, long line) {
    kv_memory & mem = ctx_.memory();
    if (k == op_kind::add || k == op_kind::div) check_pos_op(k, s, p0, p1, delta);
    bool ok = true;
    switch (k) {
        case op_kind::rm: ok = mem.seq_rm(s, p0, p1); break;
        case op_kind::cp: mem.seq_cp(s, dst, p0, p1); break;
        case op_kind::keep: mem.seq_keep(s); break;
        case op_kind::add: mem.seq_add(s, p0, p1, delta); break;
        case op_kind::div: mem.seq_div(s, p0, p1, delta); break;
        case op_kind::clear: mem.clear(); break;
        case op_kind::decode: break;   // not a sequence op (run() sends decodes to decode())
    }
    if (!ops_.empty()) after_op(seq_group(k, s, p0, p1, delta, dst, line), 0);
    return ok;
}

bool op_runner::seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1, long line) { return seq_op(op_kind::rm, s, p0, p1, 0, -1, line); }
void op_runner::seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1, long line) {
    seq_op(op_kind::cp, src, p0, p1, 0, dst, line);
}
void op_runner::seq_keep(llama_seq_id s, long line) { seq_op(op_kind::keep, s, -1, -1, 0, -1, line); }
void op_runner::seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos delta, long line) {
    seq_op(op_kind::add, s, p0, p1, delta, -1, line);
}
void op_runner::seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d, long line) { seq_op(op_kind::div, s, p0, p1, d, -1, line); }
void op_runner::clear(long line) { seq_op(op_kind::clear, -1, -1, -1, 0, -1, line); }

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
    if (partial || ops_.empty()) return ok;
    after_op(seq_group(op_kind::rm, dest, -1, -1, 0, -1, line), 0);
    const std::vector<llama_pos> & p = pos.front();
    llama_batch_in b;
    for (size_t o = 0, k = 0; o < p.size(); o += n_chunk, ++k) {
        b.pos.clear();
        b.seq_id.clear();
        for (size_t i = o; i < std::min(p.size(), o + n_chunk); ++i) b.add(p[i], {dest});
        after_op(decode_group_of(b, fmt::format("{}.{}", label, k), line), ok ? 0 : 1);
    }
    return ok;
}

}  // namespace kvsim
