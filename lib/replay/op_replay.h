// Replay of a native op trace through the cache: one llama_decode per decode group, one
// llama_memory_seq_* call per sequence op, exactly as kvoracle drives the real llama.cpp.
#pragma once

#include "drive/op_runner.h"
#include "kv/context.h"
#include "trace/op_trace.h"

#include <cstdint>
#include <functional>

namespace kvsim {

struct op_replay_result {
    uint64_t n_decode = 0;          // llama_decode calls
    uint64_t n_decode_ok = 0;       // rc 0
    uint64_t n_no_slot = 0;         // rc 1 (find_slot failed)
    uint64_t n_invalid = 0;         // rc -1 (batch validation)
    uint64_t n_seq_ops = 0;         // rm/cp/keep/add/div/clear
    uint64_t n_tokens_placed = 0;   // tokens of successful decodes
    uint64_t n_ubatches = 0;
    long interrupted_at_line = 0;   // Ctrl-C: the first op not replayed (0 = ran to the end)
};

// Replay every group in order, each through the op door (op_runner::run). `ops` (optional) sees
// every op (--dump-cells' cell_dumper, the timeline; an op_fanout for several); `obs`
// (optional) sees updates and ubatch placements; `progress` (optional) is called after each
// group with (groups done, groups total). Stops before the next op once interrupted()
// (lib/util/interrupt.h) is set, recording where.
// Errors: input_error(trace path, line, value, why) for a decode group over n_batch, a seq id
// the cache cannot hold in a sequence op, or a partial cross-stream seq_cp (llama.cpp aborts
// on all three), and for every other lib_error of the door (a position past int32: the value is
// the seq_add / seq_div delta, else the op's text).
op_replay_result replay_ops(const op_trace & t, context & ctx, op_observer * ops, decode_observer * obs,
                            const std::function<void(size_t, size_t)> & progress = {});

}  // namespace kvsim
