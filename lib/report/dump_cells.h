// Cell-by-cell JSON lines in kvoracle's format (../shared/tools/kvoracle/README.md: events
// config, apply, state), so that its compare.py can hold a kvsim replay against llama.cpp.
#pragma once

#include "drive/op_runner.h"
#include "kv/context.h"

#include <ostream>
#include <string>

namespace kvsim {

// {"cache":NAME,"streams":[{"stream","size","used","has_shift","used_max_p1","map","cells"}]}
// where cells = [[idx, pos, [seq ids], shift (only when non-zero)], ...] of non-empty cells.
std::string cache_state_json(const kv_cache & c);

// --dump-cells: an op observer of the op door (drive/op_runner.h) writing kvoracle's events.
class cell_dumper : public op_observer {
public:
    explicit cell_dumper(std::ostream & out) : out_(out) {}

    // The config event; call first: the op events read `ctx` (kept by reference).
    void config(const context & ctx);
    // One ubatch placed in one cache (kvoracle's `apply` event).
    void apply(long line, const kv_cache & c, const slot_info & sinfo);
    // State after an op: rc (decodes only, rc_valid), per-seq [pos_min, pos_max] for seq ids
    // below kvoracle's report limit (unified: max(n_seq_max, 16), else n_seq_max), all caches.
    void state(long line, const std::string & op, const context & ctx, bool rc_valid, int rc);

    // op_observer: a placement is an `apply` event, an op a `state` event (rc for decodes).
    void on_place(long line, const kv_cache & c, const slot_info & sinfo) override { apply(line, c, sinfo); }
    void on_op(const op_group & g, int rc) override;

private:
    std::ostream & out_;
    const context * ctx_ = nullptr;
    long n_apply_ = 0;
};

}  // namespace kvsim
