// The single door through which replays touch the cache: every llama_decode and
// llama_memory_seq_* call goes through here, so that it can be dumped (kvoracle format),
// recorded as a native op trace (--emit-ops) and observed, identically for op traces and for
// the scheduler's request traces.
#pragma once

#include "kv/context.h"
#include "report/dump_cells.h"
#include "trace/op_trace.h"

#include <string>

namespace kvsim {

class op_runner {
public:
    // dump, record, obs may be null. `record` receives one op_group per call.
    op_runner(context & ctx, cell_dumper * dump, op_trace * record, decode_observer * obs);

    // llama_decode; `line` tags dump events (trace line, or a running op number); `label` names
    // the call in a recorded trace (default "d<n>").
    int decode(const llama_batch_in & batch, long line, const std::string & label = {});
    bool seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1, long line);
    void seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1, long line);
    void seq_keep(llama_seq_id s, long line);
    void seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos delta, long line);
    void seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d, long line);
    void clear(long line);

    // llama_state_seq_set_data_ext(dest): cache i of ctx.memory().caches() gets
    // kv_cache::restore_seq(dest, pos[i]) (an empty list leaves that cache alone: the base cache of a
    // PARTIAL_ONLY restore). A full restore (`partial` false) is recorded in the server oracle's
    // form: `rm dest -1 -1`, then decode calls "<label>.<k>" of at most n_chunk of the first cache's
    // positions; a partial one has no op-trace form and is not recorded. Observers get
    // on_restore per cache (the kernel hooks write the cells' K/V, time nothing).
    // false = no room (dest then holds no cells).
    bool restore(llama_seq_id dest, const std::vector<std::vector<llama_pos>> & pos, bool partial, const std::string & label,
                 uint32_t n_chunk, long line);

    context & ctx() { return ctx_; }
    decode_observer * observer() const { return obs_; }
    // Replace the observer (the scheduler chains its own in front of the caller's).
    void set_observer(decode_observer * obs) { obs_ = obs; }
    uint64_t n_decode_calls() const { return n_decode_; }

private:
    class forwarder;
    void after_op(const op_group & g, bool is_decode, int rc);
    op_group seq_op_group(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst, long line);

    context & ctx_;
    cell_dumper * dump_;
    op_trace * record_;
    decode_observer * obs_;
    long line_ = 0;
    uint64_t n_decode_ = 0;
};

// Rows of a recorded decode: one per run of consecutive tokens with the same sequences and
// consecutive positions, each with an explicit p0, under the batch label `label`.
op_group decode_group_of(const llama_batch_in & batch, const std::string & label, long line);

// kvoracle-style text of an op ("decode 0:5@10", "rm 1 0 -1", ...), used in dumps.
std::string op_text(const op_group & g);

}  // namespace kvsim
