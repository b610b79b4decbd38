// The op door: the single way replays touch the cache. Every llama_decode and llama_memory_seq_*
// call of both drivers (the op replay, lib/replay/op_replay.h, and the llama-server scheduler,
// lib/sched/server_sim.h) goes through an op_runner, so that op observers see it identically for op
// traces and request traces: --dump-cells (report/dump_cells.h), --emit-ops (op_recorder) and the
// timeline (report/trace_events.h). The door knows the cache and the op-trace vocabulary, nothing
// of reports or drivers.
#pragma once

#include "kv/context.h"
#include "trace/op_trace.h"

#include <memory>
#include <string>
#include <vector>

namespace kvsim {

// Sees every op that went through the door. (The cache's own events, K-shift and ubatch placements,
// go to a decode_observer, lib/kv/context.h.)
class op_observer {
public:
    virtual ~op_observer() = default;
    // A ubatch of the running op (its trace line `line`) was placed in cache `c`: kvoracle's
    // `apply` event. Comes before that op's on_op.
    virtual void on_place(long line, const kv_cache & c, const slot_info & sinfo) {
        (void) line; (void) c; (void) sinfo;
    }
    // After the op ran. g: the op in native op-trace form (a decode: one row per run of consecutive
    // tokens with the same sequences and consecutive positions, each with an explicit p0, under its
    // batch label; a sequence op: one row, negative p0/p1 as -1). rc: the decode_rc of a decode, 0
    // for a sequence op.
    virtual void on_op(const op_group & g, int rc) = 0;
};

// Forwards to several op observers, in the order added.
class op_fanout : public op_observer {
public:
    void add(op_observer * o) {
        if (o) obs_.push_back(o);
    }
    bool empty() const { return obs_.empty(); }
    void on_place(long line, const kv_cache & c, const slot_info & sinfo) override {
        for (auto * o : obs_) o->on_place(line, c, sinfo);
    }
    void on_op(const op_group & g, int rc) override {
        for (auto * o : obs_) o->on_op(g, rc);
    }

private:
    std::vector<op_observer *> obs_;
};

// --emit-ops: appends every op to a native op trace (write_op_trace writes it out).
class op_recorder : public op_observer {
public:
    explicit op_recorder(op_trace & out) : out_(out) {}
    void on_op(const op_group & g, int rc) override {
        (void) rc;
        out_.groups.push_back(g);
    }

private:
    op_trace & out_;
};

class op_runner {
public:
    // obs (may be null) sees the cache's updates and placements of every op.
    explicit op_runner(context & ctx, decode_observer * obs = nullptr);
    // The usual wiring: op observer `first` (e.g. --dump-cells' cell_dumper), then an op_recorder
    // appending to `record` (--emit-ops); each may be null.
    op_runner(context & ctx, op_observer * first, op_trace * record, decode_observer * obs);
    op_runner(const op_runner &) = delete;
    op_runner & operator=(const op_runner &) = delete;

    // Adds an op observer after those already there (null is ignored).
    void add_op_observer(op_observer * o) { ops_.add(o); }

    // The entry point for a trace's op group: a decode group becomes one llama_decode of its rows
    // (make_decode_batch), a sequence op one llama_memory_seq_* call (llama.cpp's memory API).
    // Returns the decode_rc of a decode, 0 for a sequence op. Throws lib_error (core/errors.h) as
    // the cache does (a seq id it cannot hold, a partial cross-stream seq_cp, a divisor <= 0) and
    // where llama_pos (int32) would overflow: decode positions past INT32_MAX (make_decode_batch),
    // a seq_add / seq_div that would move a position or pending shift out of int32 (the position
    // guard: nothing is changed then; value() is the delta). Callers check n_batch first
    // (context::decode throws usage_error past it).
    int run(const op_group & g);

    // The scheduler's and the benchmarks' calls, each one op through the same door (seq_add and
    // seq_div behind the same position guard as run()).
    // llama_decode; `line` tags the op (request trace line, or a running op number); `label`
    // names the call in a recorded trace (default "d<n>", n = decode calls so far).
    int decode(const llama_batch_in & batch, long line, const std::string & label = {});
    bool seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1, long line);
    void seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1, long line);
    void seq_keep(llama_seq_id s, long line);
    void seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos delta, long line);
    void seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d, long line);
    void clear(long line);

    // llama_state_seq_set_data_ext(dest): cache i of ctx.memory().caches() gets
    // kv_cache::restore_seq(dest, pos[i]) (an empty list leaves that cache alone: the base cache of a
    // PARTIAL_ONLY restore). A full restore (`partial` false) reaches the op observers in the server
    // oracle's form: `rm dest -1 -1`, then decode calls "<label>.<k>" of at most n_chunk of the first
    // cache's positions; a partial one has no op-trace form and is not seen by them. The decode
    // observer gets on_restore per cache (the kernel hooks write the cells' K/V, time nothing).
    // false = no room (dest then holds no cells).
    bool restore(llama_seq_id dest, const std::vector<std::vector<llama_pos>> & pos, bool partial, const std::string & label,
                 uint32_t n_chunk, long line);

    context & ctx() { return ctx_; }
    decode_observer * observer() const { return obs_; }
    // Replace the decode observer (the scheduler chains its own in front of the caller's).
    void set_observer(decode_observer * obs) { obs_ = obs; }

private:
    class forwarder;
    // The position guard of seq_add / seq_div: lib_out_of_range when a cell the op moves would get a
    // position past INT32_MAX or a pending shift outside int32 (kv_cells::pos_add_result, pos_div_result).
    void check_pos_op(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta) const;
    // One llama_memory_seq_* call (the fields a kind does not use are ignored); false when seq_rm refused.
    bool seq_op(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst, long line);
    void after_op(const op_group & g, int rc);

    context & ctx_;
    decode_observer * obs_;
    op_fanout ops_;
    std::unique_ptr<op_recorder> recorder_;
    long line_ = 0;
    uint64_t n_decode_ = 0;
};

// Installs a decode observer on an op_runner for a scope and puts the previous one back when the
// scope ends, also when an exception leaves it (the scheduler chains its step-time observer in
// front of the caller's; the observer must outlive the scope).
class scoped_decode_observer {
public:
    scoped_decode_observer(op_runner & run, decode_observer * obs) : run_(run), prev_(run.observer()) { run.set_observer(obs); }
    ~scoped_decode_observer() { run_.set_observer(prev_); }
    scoped_decode_observer(const scoped_decode_observer &) = delete;
    scoped_decode_observer & operator=(const scoped_decode_observer &) = delete;

private:
    op_runner & run_;
    decode_observer * prev_;
};

// Builds the llama_decode batch of a decode group as kvoracle's do_batch does: a row starts at
// its p0, or at the next position of its first sequence (memory seq_pos_max + 1, advanced by
// earlier rows of the same group); every sequence of the row then continues after it.
// Throws lib_out_of_range when a position would pass INT32_MAX.
llama_batch_in make_decode_batch(const op_group & g, const kv_memory & mem, uint32_t n_seq_ids);

// The native op-trace form of a decode (see op_observer::on_op) under the batch label `label`.
op_group decode_group_of(const llama_batch_in & batch, const std::string & label, long line);

// kvoracle-style text of an op ("decode 0:5@10", "rm 1 0 -1", ...), used in dumps.
std::string op_text(const op_group & g);

}  // namespace kvsim
